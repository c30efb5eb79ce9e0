-- What deleting an app removes from the tables that have no foreign key to apps (Migrations/0023): its messages and
-- their dedupe keys (the messages' own dependants — edits, reactions, hidden marks, receipts — go with them by their
-- keys to messages). A row trigger on apps, so every way of deleting an app (the admin route, the previous release's
-- binary, psql) cleans up alike. AFTER triggers fire in name order and the foreign keys' cascade triggers are named
-- RI_ConstraintTrigger_…, which sorts before this one: the cascade to conversation_seqs waits for any writer holding
-- one of the app's seq rows, so this trigger's statements (each with a new snapshot) see what that writer committed.
CREATE OR REPLACE FUNCTION parley_app_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM messages WHERE app_id = OLD.app_id;
    DELETE FROM message_keys WHERE app_id = OLD.app_id;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS apps_deleted ON apps;
CREATE TRIGGER apps_deleted AFTER DELETE ON apps FOR EACH ROW EXECUTE FUNCTION parley_app_deleted();
