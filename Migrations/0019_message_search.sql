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
-- The functions live here, not in functions/: the stored column and the index hold their results, so a changed
-- definition needs a migration that recomputes them, never a silent re-application.
--
-- The column's expression is written out rather than wrapped in one SQL function: a generated column's expression is
-- planned for every INSERT statement, and a SQL function in it is parsed again each time to be inlined (with one, a
-- single-row INSERT ran at 0.3–0.4× of the same INSERT without the column; written out, at 0.7×, bench/RESULTS.md).
-- Only type 10 needs a subquery, which a generation expression cannot hold: it calls a PL/pgSQL function (planned
-- once per session, and only for type-10 rows).
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;

-- The searchable text of a type-10 body: its text items' `text` and its media items' `file_name`, space-separated.
CREATE FUNCTION parley_multiple_search_text(p_body text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT string_agg(coalesce(i -> 'body' ->> 'text', i -> 'body' ->> 'file_name'), ' ' ORDER BY n)
            FROM jsonb_array_elements(p_body::jsonb -> 'items') WITH ORDINALITY AS e(i, n));
END $$;

-- What the trigram index holds for a searchable text (the server builds a keyword's probe the same way,
-- MessageSearch.pattern): its UTF-8 bytes in hexadecimal. decode(…, 'escape') turns the text into its bytes with only
-- the backslash special, hence the doubling; every function here is immutable, so the planner inlines it alike in the
-- index and in the query.
CREATE FUNCTION parley_search_key(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT encode(decode(replace(p_text, '\', '\\'), 'escape'), 'hex')
$$;

-- Type 100's summary is optional; concat_ws would do, but it is only STABLE, and a generation expression must be
-- immutable.
ALTER TABLE messages ADD COLUMN search_text text GENERATED ALWAYS AS (lower(CASE
    WHEN body IS NULL THEN NULL
    WHEN type = 1 THEN body::jsonb ->> 'text'
    WHEN type = 200 THEN body::jsonb ->> 'searched_content'
    WHEN type BETWEEN 11 AND 14 THEN body::jsonb ->> 'file_name'
    WHEN type = 100 THEN (body::jsonb ->> 'title') || coalesce(' ' || (body::jsonb ->> 'summary'), '')
    WHEN type = 10 THEN parley_multiple_search_text(body)
END COLLATE "und-x-icu")) STORED;

CREATE INDEX messages_search ON messages USING gin (app_id, parley_search_key(search_text) gin_trgm_ops)
    WHERE search_text IS NOT NULL;
