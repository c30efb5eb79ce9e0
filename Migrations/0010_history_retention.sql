-- History retention (API.md §3 `history_retention_days`): the purge finds an app's old messages by `timestamp`.
-- Messages are appended in time order, so a BRIN index (a few pages, next to no cost per insert on the send path)
-- narrows the purge to the block ranges that hold old messages.
CREATE INDEX messages_by_time ON messages USING brin (timestamp);
