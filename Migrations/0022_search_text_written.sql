-- messages.search_text (Migrations/0019) stops being a generated column: its writers fill it with
-- parley_search_text(type, body), the same expression, and a revoke or delete clears it.
--
-- PostgreSQL 15 rebuilds a stored generation expression from its catalog text at the start of every statement that
-- inserts into or updates the table, whatever columns the UPDATE sets: parsing that tree was 4–5 % of a revoke's CPU
-- (bench/RESULTS.md 2026-12-03), and every messages UPDATE (receipts, pins, reactions' summary) and every send batch
-- paid it. Written in the statement instead, it is planned with it, once per prepared statement, and a SQL function
-- can be used (inlined when the statement is planned; in a generation expression it was parsed again each time).
-- DROP EXPRESSION keeps the stored values and rewrites nothing.
--
-- Writers: the send statement (MessageWrite), an edit (MessageStore.saveEdit), a revoke or delete for everyone
-- (MessageStore.markGone), an import (MessageImport.statement), and the hard delete of a user (below).
CREATE FUNCTION parley_search_text(p_type int, p_body text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT lower(CASE
        WHEN p_body IS NULL THEN NULL
        WHEN p_type = 1 THEN p_body::jsonb ->> 'text'
        WHEN p_type = 200 THEN p_body::jsonb ->> 'searched_content'
        WHEN p_type BETWEEN 11 AND 14 THEN p_body::jsonb ->> 'file_name'
        WHEN p_type = 100 THEN (p_body::jsonb ->> 'title') || coalesce(' ' || (p_body::jsonb ->> 'summary'), '')
        WHEN p_type = 10 THEN parley_multiple_search_text(p_body)
    END COLLATE "und-x-icu")
$$;

ALTER TABLE messages ALTER COLUMN search_text DROP EXPRESSION;

-- Hard user delete (Migrations/0006): the tombstones lose their searchable text with their body.
CREATE OR REPLACE FUNCTION parley_user_hard_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messages SET deleted = true, body = NULL, search_text = NULL
    WHERE app_id = OLD.app_id AND sender = OLD.user_id AND NOT deleted;
    DELETE FROM message_keys WHERE app_id = OLD.app_id AND sender = OLD.user_id;
    RETURN OLD;
END $$;
