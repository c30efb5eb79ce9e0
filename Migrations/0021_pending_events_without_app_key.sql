-- pending_events loses its foreign key to apps, as events (0001) and idempotency_keys never had one.
--
-- Every event a writing transaction appends ran the key's check: a query through SPI that takes a KEY SHARE lock on
-- the app's row, so every concurrent writer of an app locked the same apps tuple (a MultiXact once two overlap), and
-- the check alone was about 2 % of a revoke's CPU (bench/RESULTS.md 2026-12-03). The rows live for milliseconds, until
-- the sequencer moves them into events. Deleting an app clears them explicitly (AppStore.delete), and the sequencer
-- drops the pending events of an app that has no event head any more (one written by a transaction that committed
-- while the app was being deleted).
ALTER TABLE pending_events DROP CONSTRAINT pending_events_app_id_fkey;
