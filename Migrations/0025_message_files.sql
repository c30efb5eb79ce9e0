-- Which stored messages name which uploaded files by `file_id` (docs/files.md#files-in-messages).
--
-- * A user may download a file it did not upload when it can read a message that references it: this table finds
--   those messages without reading message bodies.
-- * Revoking a message or deleting it for everyone deletes the files only that message referenced (the app setting
--   `delete_files_with_messages`): this table says whether another message still references them.
-- * Rows are written in the statement that stores the message, and go with it (a message purged by retention, an
--   app deleted); a revoke or a delete for everyone removes them itself, since the message row stays as a tombstone.
--   No foreign key to `files`: a deleted file leaves the messages that named it as they were.
CREATE TABLE message_files (
    app_id      text NOT NULL,
    file_id     text NOT NULL,
    message_id  text NOT NULL,
    PRIMARY KEY (app_id, file_id, message_id),
    FOREIGN KEY (app_id, message_id) REFERENCES messages (app_id, message_id) ON DELETE CASCADE
);
-- The foreign key's cascade, and a revoke's lookup of its message's files.
CREATE INDEX message_files_by_message ON message_files (app_id, message_id);
