-- Event ids without an app-wide lock across commit (API.md §14.1, DESIGN.md "No lock shared by a whole app is held
-- across a commit").
--
-- Until now every event-writing transaction took its app's `event_heads` row to number its events and held it through
-- its commit, so each app committed one transaction at a time (~850 commits/s here). Now a writer appends its events
-- to `pending_events` (no shared row touched) in its own transaction, and the sequencer (Sources/Parley/Events/
-- EventSequencer.swift, one per node; nodes serialise per app on the head row) moves the committed pending events of
-- an app into `events` in one short transaction per batch, numbering them after the head in `pending` order. Readers
-- see `events` only, so ids become visible strictly in id order. The head lock is now held across one commit per
-- batch of sequenced events, not per writer.
--
-- `pending` comes from one sequence: within a transaction it follows the append order, and a transaction that starts
-- after another committed gets larger values, so causally ordered writes keep their order.

CREATE SEQUENCE pending_events_order;

CREATE TABLE pending_events (
    app_id           text NOT NULL REFERENCES apps ON DELETE CASCADE,
    pending          bigint NOT NULL DEFAULT nextval('pending_events_order'),
    type             text NOT NULL,
    created_at       bigint NOT NULL,
    data             text NOT NULL,
    audience         text[] NOT NULL DEFAULT '{}',
    group_id         text,
    room_id          text,
    to_group_members boolean NOT NULL DEFAULT false,
    order_key        text NOT NULL,
    -- The writing transaction: membership rows written by the same transaction are stamped with its events' ids.
    xact             xid8 NOT NULL DEFAULT pg_current_xact_id(),
    PRIMARY KEY (app_id, pending)
);
-- Rows live for milliseconds: vacuum it often so the sequencer's scans do not walk dead rows.
ALTER TABLE pending_events SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000,
                                autovacuum_vacuum_cost_delay = 0);

-- Membership intervals (Migrations/0009) are stamped with event ids by the sequencer now, not by a trigger in the
-- writer's transaction: the writer's transaction id links a membership row to the events of the same transaction.
-- A NULL stamp means "its event is not sequenced yet": joined later than every visible event, or (left) still a
-- member at every visible event.
DROP TRIGGER events_stamp_membership ON events;
DROP FUNCTION parley_stamp_membership();

ALTER TABLE group_members ADD COLUMN joined_xact xid8 DEFAULT pg_current_xact_id();

ALTER TABLE group_member_history DROP CONSTRAINT group_member_history_pkey;
ALTER TABLE group_member_history ALTER COLUMN joined_event DROP NOT NULL;
ALTER TABLE group_member_history ADD COLUMN joined_xact xid8;
ALTER TABLE group_member_history ADD COLUMN left_xact xid8 DEFAULT pg_current_xact_id();
CREATE UNIQUE INDEX group_member_history_interval ON group_member_history (app_id, group_id, user_id, joined_event);
CREATE INDEX group_member_history_unjoined ON group_member_history (app_id, group_id) WHERE joined_event IS NULL;

-- The send statement lives in Swift now (Sources/Parley/Messages/MessageWrite.swift): set-based over a batch of sends.
DROP FUNCTION parley_send_message(text, bigint, text, text, text, text, text, text, text, boolean, int, text, text, text[],
    boolean, boolean, text, text, boolean, int, boolean, boolean, int, text, boolean, boolean, boolean, boolean, text, text,
    text, text[]);
-- parley_member_at is re-defined by Migrations/functions/parley_member_at.sql (NULL stamps as above).
