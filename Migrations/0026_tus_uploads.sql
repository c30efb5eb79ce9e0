-- Resumable uploads (docs/files.md#resumable-uploads-tus): the tus 1.0.0 protocol at /v1/uploads.
--
-- * An upload is created with its length and metadata; its bytes arrive in any number of PATCH requests, each
--   starting where the last stopped, and become a file (through the same path as POST /v1/files: derived image
--   variants, deduplication, quota) once all of them are there.
-- * The bytes received so far are staged in PostgreSQL whatever the storage backend: in a blob of state `staging`
--   (file_blobs, Migrations/0024_files.sql) whose 256 KiB chunks (the last one partial) hold bytes 0..<upload_offset.
--   The abandoned-upload sweep looks at `uploading` blobs only; a staging blob lives as long as its upload row.
-- * `upload_offset` is written in the transaction that writes the chunks it covers, so it is always the number of
--   bytes durably stored (a PATCH cut off keeps what arrived; the client asks with HEAD and resumes from there).
-- * An upload expires 24 h after its last PATCH (`expires_at`); the file sweep deletes expired uploads, their
--   staging blob and its chunks.

CREATE TABLE file_uploads (
    app_id         text NOT NULL REFERENCES apps ON DELETE CASCADE,
    upload_id      text NOT NULL,
    -- The file's owner once complete (null: the app's own file); a user token touches only its own uploads.
    owner_id       text,
    -- The kind and name the file gets, decided at creation (its size limit was checked against `length` then).
    kind           text NOT NULL,         -- image | file | audio | video
    file_name      text NOT NULL,
    -- The MIME type the client claimed (`filetype` metadata), normalised; images are sniffed instead.
    mime_claim     text,
    -- `Upload-Metadata` as the client sent it, answered back by HEAD as tus asks.
    metadata       text,
    -- `Upload-Length`: the file's size in bytes.
    length         bigint NOT NULL,
    -- Bytes stored so far (`Upload-Offset`).
    upload_offset  bigint NOT NULL DEFAULT 0,
    -- The staging blob holding the bytes so far; deleting it deletes the upload too.
    blob_id        text NOT NULL,
    -- Set while the request that received the last byte makes the file, so a second request cannot make it again.
    completing     boolean NOT NULL DEFAULT false,
    created_at     bigint NOT NULL,
    -- 24 h after the last PATCH (`Upload-Expires`): later requests answer 410 until the sweep deletes the upload.
    expires_at     bigint NOT NULL,
    PRIMARY KEY (app_id, upload_id),
    FOREIGN KEY (app_id, blob_id) REFERENCES file_blobs ON DELETE CASCADE
);
-- The sweep of expired uploads, oldest first.
CREATE INDEX file_uploads_by_expiry ON file_uploads (expires_at);
-- The foreign key's check when a blob is deleted.
CREATE INDEX file_uploads_by_blob ON file_uploads (app_id, blob_id);
