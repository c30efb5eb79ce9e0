-- Message search (API.md §11.9): case-insensitive substring keywords over the searchable text of stored messages,
-- found through a trigram index rather than by reading the app's messages.
--
-- * `messages.search_text` is a STORED generated column: the text §11.9 matches (type 1 `text`, 200 `searched_content`,
--   11–14 `file_name`, 100 `title` and `summary`, 10 its text items and file names) lowercased, NULL for every other
--   type. Being computed from `type` and `body`, it is right after every write without the writers knowing: the send
--   path's set-based INSERT, an edit (new body), a revoke (type 31: NULL) and a delete for everyone (body NULL: NULL).
--   Fields are joined with a space: keywords never contain one (q is split on spaces), so no keyword can match across
--   two fields.
-- * Lowercasing uses the ICU root collation, not the database's: the embedded cluster is initialised with
--   `--locale=C`, where lower() folds ASCII only (API.md §1.5 asks for Unicode lowercasing).
-- * The index is not on `search_text` itself. pg_trgm takes its word characters from the database's LC_CTYPE, and in
--   the C locale only ASCII letters and digits are word characters: Chinese, Japanese and emoji text would give no
--   trigram at all. The index is on the hexadecimal UTF-8 of `search_text` (parley_search_key), where every character
--   is made of word characters, so every keyword of 2 bytes or more (any CJK character, any emoji, two ASCII letters)
--   has trigrams whatever the locale; a keyword's hex is a substring of the text's hex whenever the keyword is a
--   substring of the text, so the index never misses a match. It may return a row where the hex matches across a
--   byte boundary; the query re-checks the keyword on `search_text` itself.
-- * `app_id` leads the index (btree_gin), so the candidates are the app's only; a keyword without trigrams (a single
--   ASCII character) is then answered from the app's entries (GIN's exclude-only scan) rather than the whole table.
--
-- The two functions live here, not in functions/: the stored column and the index hold their results, so a changed
-- definition needs a migration that recomputes them, never a silent re-application.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;

-- The searchable text of a message body, lowercased; NULL when the type has none.
CREATE FUNCTION parley_message_search_text(p_type int, p_body text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT lower(CASE
        WHEN p_body IS NULL THEN NULL
        WHEN p_type = 1 THEN p_body::jsonb ->> 'text'
        WHEN p_type = 200 THEN p_body::jsonb ->> 'searched_content'
        WHEN p_type BETWEEN 11 AND 14 THEN p_body::jsonb ->> 'file_name'
        WHEN p_type = 100 THEN concat_ws(' ', p_body::jsonb ->> 'title', p_body::jsonb ->> 'summary')
        WHEN p_type = 10 THEN (
            SELECT string_agg(coalesce(i -> 'body' ->> 'text', i -> 'body' ->> 'file_name'), ' ' ORDER BY n)
            FROM jsonb_array_elements(p_body::jsonb -> 'items') WITH ORDINALITY AS e(i, n))
    END COLLATE "und-x-icu")
$$;

-- What the trigram index holds for a searchable text (and what a keyword is turned into to probe it): its UTF-8 bytes
-- in hexadecimal. IMMUTABLE though convert_to is STABLE: convert_to only depends on the database encoding, which
-- never changes.
CREATE FUNCTION parley_search_key(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT encode(convert_to(p_text, 'UTF8'), 'hex')
$$;

ALTER TABLE messages ADD COLUMN search_text text GENERATED ALWAYS AS (parley_message_search_text(type, body)) STORED;

CREATE INDEX messages_search ON messages USING gin (app_id, parley_search_key(search_text) gin_trgm_ops)
    WHERE search_text IS NOT NULL;
