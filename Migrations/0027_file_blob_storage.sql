-- Which storage backend holds a blob's bytes (docs/files.md#storage): `postgres` (its chunks in `file_chunks`) or
-- `s3` (one object, `<app_id>/<blob_id>`, in the configured bucket). Reads and deletes follow what each blob
-- recorded, and new uploads go to the configured backend, so changing the backend of a running deployment loses no
-- file. Every blob written before this migration is in PostgreSQL: the default says so, and the previous release,
-- which does not name the column, keeps writing `postgres` blobs.
ALTER TABLE file_blobs ADD COLUMN storage text NOT NULL DEFAULT 'postgres';
