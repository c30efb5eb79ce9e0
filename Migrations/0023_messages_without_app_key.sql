-- messages and message_keys lose their foreign keys to apps, as events (0001) and pending_events (0021) did.
--
-- Every stored send inserted one row into each, and each row ran its key's check: a query through SPI taking a KEY
-- SHARE lock on the app's row, so every writer of an app locked the same apps tuple (a MultiXact once two overlap):
-- two checks per send, 60,394 of them in a 10 s run of 30,197 sends (bench/RESULTS.md 2026-12-06). Deleting an app
-- now removes these rows through the trigger of Migrations/functions/parley_app_deleted.sql, which fires after the
-- remaining foreign keys' cascades (so after any writer still holding a seq row of the app has committed), for the
-- previous release's binary as well as this one. conversation_seqs keeps its key: a send updates an existing row,
-- which runs no check.
ALTER TABLE messages DROP CONSTRAINT messages_app_id_fkey;
ALTER TABLE message_keys DROP CONSTRAINT message_keys_app_id_fkey;
