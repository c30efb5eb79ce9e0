-- Files and media (docs/files.md): uploads, their metadata and, with the `postgres` storage backend, their bytes.
--
-- * A blob is a stored sequence of bytes, content-addressed per app: the same bytes uploaded twice are stored once
--   (`sha256` unique per app once known). An upload writes its chunks under a fresh blob row in state `uploading` as
--   the body arrives (its SHA-256 is known only at the end); the upload's last transaction then either records the
--   blob (`stored`, with its hash and size) or, when the app already stores those bytes, deletes the new blob and
--   references the old one. A blob still `uploading` long after it started was abandoned (a crash mid-upload): the
--   file sweep deletes it.
-- * `refs` counts the files (and, later, derived variants) that use the blob; the blob goes when it reaches 0. A
--   deleted file's row goes at once (later downloads answer 404; messages keep the `file_id` in their bodies).
-- * Chunks hold ≤ 256 KiB each, stored uncompressed (`STORAGE EXTERNAL`: media is compressed already, and pglz
--   would spend CPU on every chunk to gain nothing), and go with their blob (ON DELETE CASCADE).
-- * `file_usage` keeps each app's stored bytes and live files, for the storage quota and /v1/stats, updated in the
--   transaction that records or removes a file (a sum over every blob per upload would grow with the app).

CREATE TABLE file_blobs (
    app_id      text NOT NULL REFERENCES apps ON DELETE CASCADE,
    blob_id     text NOT NULL,
    state       text NOT NULL,            -- uploading | stored
    sha256      text,                     -- lower-case hex, once stored
    size        bigint NOT NULL DEFAULT 0,
    refs        int NOT NULL DEFAULT 0,
    created_at  bigint NOT NULL,
    PRIMARY KEY (app_id, blob_id)
);
CREATE UNIQUE INDEX file_blobs_by_hash ON file_blobs (app_id, sha256) WHERE sha256 IS NOT NULL;
-- The sweep of abandoned uploads.
CREATE INDEX file_blobs_uploading ON file_blobs (created_at) WHERE state = 'uploading';

CREATE TABLE file_chunks (
    app_id   text NOT NULL,
    blob_id  text NOT NULL,
    n        int NOT NULL,                -- 0, 1, 2, … in byte order
    data     bytea NOT NULL,
    PRIMARY KEY (app_id, blob_id, n),
    FOREIGN KEY (app_id, blob_id) REFERENCES file_blobs ON DELETE CASCADE
);
ALTER TABLE file_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE TABLE files (
    app_id       text NOT NULL REFERENCES apps ON DELETE CASCADE,
    file_id      text NOT NULL,
    kind         text NOT NULL,           -- image | file | audio | video
    file_name    text NOT NULL,
    mime_type    text NOT NULL,
    size         bigint NOT NULL,
    sha256       text NOT NULL,
    blob_id      text NOT NULL,
    owner_id     text,                    -- the user it belongs to; null for the app's own files
    created_at   bigint NOT NULL,
    width        int,
    height       int,
    duration_ms  bigint,
    -- Derived variants (large, thumbnail, first_frame): {"large": {"blob_id", "sha256", "size", "mime_type", "width", "height"}, …}.
    variants     jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (app_id, file_id),
    FOREIGN KEY (app_id, blob_id) REFERENCES file_blobs
);
-- GET /v1/files, newest first, by app and by owner.
CREATE INDEX files_by_time ON files (app_id, created_at DESC, file_id DESC);
CREATE INDEX files_by_owner ON files (app_id, owner_id, created_at DESC, file_id DESC);
-- By kind too: an app's few videos among many images must not be a scan of all its files (EXPLAIN on 1,000,000 files:
-- 130 ms filtering 50,000 rows without it, 0.05 ms with it).
CREATE INDEX files_by_kind ON files (app_id, kind, created_at DESC, file_id DESC);
-- The foreign key's check when a blob is deleted (its files must be gone).
CREATE INDEX files_by_blob ON files (app_id, blob_id);

CREATE TABLE file_usage (
    app_id  text PRIMARY KEY REFERENCES apps ON DELETE CASCADE,
    bytes   bigint NOT NULL DEFAULT 0,    -- stored bytes (each blob once)
    files   bigint NOT NULL DEFAULT 0     -- files
);
