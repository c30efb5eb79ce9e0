-- Rooms (API.md §10): transient chat rooms with explicit membership, room and member attributes, delayed
-- destruction, and room messages (§11.1 `conversation_type: room`).
--
-- * A room row lives from its creation to its destruction; destruction deletes it (attributes, member attributes and
--   the recent cache go with it by cascade) after moving its members to the history. The id may be used again: the
--   room seq lives in `conversation_seqs` ('room', room_id), which destruction leaves alone, so a new room with the
--   same id continues it, and `first_seq` (the head when the room was created) hides older messages from its history.
-- * Room events go to "the members at write time" exactly as group message events do (Migrations/0009, 0011): they
--   carry `to_group_members` with `room_id` set and `group_id` null, and membership intervals are stamped with event ids
--   by the sequencer (`room.created` / `room.member_joined` open one, `room.member_left` / `room.destroyed` close it),
--   so a 2,000-member room writes no 2,000-element audience array per message.
-- * Every membership change locks the room row, so `member_count`, `empty_since` / `destroy_at` and the attribute
--   quotas are exact under concurrency.

CREATE TABLE rooms (
    app_id          text NOT NULL REFERENCES apps ON DELETE CASCADE,
    room_id         text NOT NULL,
    name            text NOT NULL DEFAULT '',
    destroy_delay_s int NOT NULL DEFAULT 0,
    created_by      text,                   -- null: created by the app
    created_at      bigint NOT NULL,
    member_count    int NOT NULL DEFAULT 0,
    empty_since     bigint,                 -- null while members > 0 or if never entered
    destroy_at      bigint,                 -- scheduled destruction (server-clock ms)
    first_seq       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (app_id, room_id)
);
-- GET /v1/rooms: by created_at desc, then room_id (byte order).
CREATE INDEX rooms_list ON rooms (app_id, created_at DESC, room_id COLLATE "C" DESC);
-- The destruction timer, across apps.
CREATE INDEX rooms_destroy_due ON rooms (destroy_at) WHERE destroy_at IS NOT NULL;

CREATE TABLE room_members (
    app_id        text NOT NULL,
    room_id       text NOT NULL,
    user_id       text NOT NULL,
    extended_data text NOT NULL DEFAULT '',
    entered_at    bigint NOT NULL,
    -- The event that recorded the entry (room.created or room.member_joined), stamped by the sequencer; NULL until then.
    joined_event  bigint,
    joined_xact   xid8 DEFAULT pg_current_xact_id(),
    PRIMARY KEY (app_id, room_id, user_id),
    FOREIGN KEY (app_id, room_id) REFERENCES rooms ON DELETE CASCADE,
    FOREIGN KEY (app_id, user_id) REFERENCES users ON DELETE CASCADE
);
-- Rooms per user (max_rooms_per_user) and a hard-deleted user's rooms.
CREATE INDEX room_members_user ON room_members (app_id, user_id);
-- GET /v1/rooms/{room_id}/members: by entered_at, then user_id. Keyed by an expression (room ids have no '/'), not by
-- (app_id, room_id): a plain (app_id, room_id, …) index ties with the primary key for a member probe on a table with
-- no statistics yet (a room filling up in its first minute), and the planner then walked every member of the room
-- for each enter, leave and room send (1.3 ms instead of 0.02 ms at 2,500 members).
CREATE INDEX room_members_entered ON room_members ((app_id || '/' || room_id), entered_at, user_id COLLATE "C");
CREATE INDEX room_members_unstamped ON room_members (app_id, room_id) WHERE joined_event IS NULL;

-- Past memberships (leave, kick, offline removal, hard delete, destruction), stamped like group_member_history.
CREATE TABLE room_member_history (
    app_id       text NOT NULL REFERENCES apps ON DELETE CASCADE,
    room_id      text NOT NULL,
    user_id      text NOT NULL,
    joined_event bigint,
    joined_xact  xid8,
    left_event   bigint,
    left_xact    xid8 DEFAULT pg_current_xact_id()
);
CREATE UNIQUE INDEX room_member_history_interval ON room_member_history (app_id, room_id, user_id, joined_event);
CREATE INDEX room_member_history_unstamped ON room_member_history (app_id, room_id)
    WHERE joined_event IS NULL OR left_event IS NULL;
-- Trimmed with the event log: an interval that ended before the trim point answers nothing any more.
CREATE INDEX room_member_history_left ON room_member_history (app_id, left_event);

CREATE TABLE room_attributes (
    app_id                  text NOT NULL,
    room_id                 text NOT NULL,
    key                     text COLLATE "C" NOT NULL,
    value                   text NOT NULL,
    owner_id                text,           -- null: the app
    delete_after_owner_left boolean NOT NULL DEFAULT false,
    updated_at              bigint NOT NULL,
    PRIMARY KEY (app_id, room_id, key),
    FOREIGN KEY (app_id, room_id) REFERENCES rooms ON DELETE CASCADE
);

-- One row per (member, key). Users who left keep theirs unless set with delete_after_owner_left.
CREATE TABLE room_member_attributes (
    app_id                  text NOT NULL,
    room_id                 text NOT NULL,
    user_id                 text COLLATE "C" NOT NULL,
    key                     text COLLATE "C" NOT NULL,
    value                   text NOT NULL,
    delete_after_owner_left boolean NOT NULL,
    PRIMARY KEY (app_id, room_id, user_id, key),
    FOREIGN KEY (app_id, room_id) REFERENCES rooms ON DELETE CASCADE
);

-- The recent cache (§10 `…/messages/recent`): messages sent with `cache: true`, the Message JSON as sent; the write
-- keeps about 50 per room and the read takes the 50 newest.
CREATE SEQUENCE room_recent_order;
CREATE TABLE room_recent_messages (
    app_id   text NOT NULL,
    room_id  text NOT NULL,
    position bigint NOT NULL DEFAULT nextval('room_recent_order'),
    message  text NOT NULL,
    PRIMARY KEY (app_id, room_id, position),
    FOREIGN KEY (app_id, room_id) REFERENCES rooms ON DELETE CASCADE
);
