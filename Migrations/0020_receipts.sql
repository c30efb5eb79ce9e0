-- Read receipts (API.md §11.8): who of a `need_receipt` message's recipients has read it, and its overall status.
--
-- The send path stays one row per message however large the group (MessageWrite.swift): the recipients are never
-- listed at send time. What a receipt needs is stored lazily:
--
-- * `receipt_recipients` — how many recipients the message has, fixed by the send statement: 1 for a peer message,
--   for a group message the group's `member_count` at send minus the sender when it is a member (the members at send
--   time other than the sender, §11.8). NULL without `need_receipt`.
-- * `receipt_reads` — how many of them have read it, bumped under the message's row lock by each new reader, so two
--   readers at once both count and each sees its own count (`message_receipt_reads` is the set behind it).
-- * `receipt_state` — NULL while the status follows `need_receipt` (`none` / `processing`), then `done` or `expired`
--   for good; `receipt_done_at` stamps `done`.
--
-- "Member at send time" is answered by seqs, not event ids: a message's `message.sent` event id is known only once
-- the sequencer numbers it (Migrations/0011) and events are trimmed long before a receipt's 30 days end, while a
-- group message's seq is fixed at commit and kept. A member's group entry records `joined_seq`, the group's head
-- when the membership began (the value its `read_seq` starts at, GroupConversations.follow: its own join tips
-- included), so a current member was a member when seq S was sent iff `joined_seq < S`; a left member's frozen entry
-- keeps its `last_seq` = the head at leave, so its last membership covered S iff `joined_seq < S <= last_seq`. A leave
-- freezes the entry under the head row's lock and a join's tips message takes that lock too, so these positions agree
-- with the seq order of sends (a join that writes no tips message, in a big group, reads the head unlocked; big
-- groups refuse `need_receipt`). The recipient count comes from the send statement's snapshot of `member_count`: a
-- membership change committing while the send waits for the head lock can leave it one off, which only the counts
-- show. Entries made before this migration start at 0 (member since the group's beginning). A user who left and
-- re-joined is judged by its latest membership.
ALTER TABLE messages
    ADD COLUMN receipt_recipients int,
    ADD COLUMN receipt_reads      int NOT NULL DEFAULT 0,
    ADD COLUMN receipt_state      text CHECK (receipt_state IN ('done', 'expired')),
    ADD COLUMN receipt_done_at    bigint;

ALTER TABLE conversations ADD COLUMN joined_seq bigint NOT NULL DEFAULT 0;

-- Receipts already requested: their recipients as well as they can still be told (peer: the other user; group: the
-- current members other than the sender).
UPDATE messages m SET receipt_recipients = CASE WHEN m.conv_type = 'peer' THEN 1 ELSE
        (SELECT count(*) FROM group_members gm WHERE gm.app_id = m.app_id AND gm.group_id = m.conv_id AND gm.user_id <> m.sender) END
WHERE m.need_receipt AND m.conv_type IN ('peer', 'group');

-- The readers of a receipt (peer: at most the other user; group: at most 500 members, §11.1 step 4). A hard-deleted
-- user's reads go with it (API.md §4: its receipts are removed); the counts, fixed like the recipients, stay.
CREATE TABLE message_receipt_reads (
    app_id     text NOT NULL,
    message_id text NOT NULL,
    user_id    text NOT NULL,
    read_at    bigint NOT NULL,
    PRIMARY KEY (app_id, message_id, user_id),
    FOREIGN KEY (app_id, message_id) REFERENCES messages (app_id, message_id) ON DELETE CASCADE,
    FOREIGN KEY (app_id, user_id) REFERENCES users ON DELETE CASCADE
);

-- Open receipts (not settled, not revoked, not a tombstone), for the expiry timer (by `timestamp`, 30 days after it)
-- and for marking a conversation read (every open receipt up to the read position, §11.7). A revoke, a delete or the
-- settling of a receipt takes its message out of both indexes, and messages without a receipt never enter them.
CREATE INDEX messages_receipt_due ON messages (timestamp)
    WHERE need_receipt AND receipt_state IS NULL AND type <> 31 AND NOT deleted;
CREATE INDEX messages_receipt_open ON messages (app_id, conv_type, conv_id, seq)
    WHERE need_receipt AND receipt_state IS NULL AND type <> 31 AND NOT deleted;
