-- Delivery receipts (docs/messages.md#delivery-receipts): which recipients of a `need_receipt` message have received
-- it, beside who has read it (Migrations/0020). Additive: a new counter column with a default and two new tables, so
-- the previous release's binary keeps working (it neither reads nor writes them).
--
-- * `receipt_deliveries` — how many recipients have received the message, bumped under the message's row lock by each
--   new one, like `receipt_reads`. A read counts as a delivery too (a message read was received), so it never falls
--   below `receipt_reads` for receipts read after this migration; older reads are shown with greatest().
ALTER TABLE messages ADD COLUMN receipt_deliveries int NOT NULL DEFAULT 0;

-- The recipients that received a receipt's message (peer: at most the other user; group: at most the members at send
-- time other than the sender). A hard-deleted user's rows go with it; the count, like the read count, stays.
CREATE TABLE message_receipt_deliveries (
    app_id       text NOT NULL,
    message_id   text NOT NULL,
    user_id      text NOT NULL,
    delivered_at bigint NOT NULL,
    PRIMARY KEY (app_id, message_id, user_id),
    FOREIGN KEY (app_id, message_id) REFERENCES messages (app_id, message_id) ON DELETE CASCADE,
    FOREIGN KEY (app_id, user_id) REFERENCES users ON DELETE CASCADE
);

-- The coalescing of delivery events: at most one `message.receipt_updated` per message per second for deliveries. A row
-- lives one second after the event it stamps (`due_at`); deliveries in that second only set `pending`, and the
-- `delivery_notices` timer then writes one event with the counts of that time (when pending) and drops the row.
CREATE TABLE message_delivery_notices (
    app_id     text NOT NULL,
    message_id text NOT NULL,
    due_at     bigint NOT NULL,
    pending    boolean NOT NULL DEFAULT false,
    PRIMARY KEY (app_id, message_id),
    FOREIGN KEY (app_id, message_id) REFERENCES messages (app_id, message_id) ON DELETE CASCADE
);
CREATE INDEX message_delivery_notices_due ON message_delivery_notices (due_at);
