-- The physical floor of a send: one durable row, one transaction. A single-row INSERT into the scripts' own small
-- table bench_floor_rows (id bigint identity primary key, body text; created and dropped by bench/lib.sh
-- reference_tables), autocommit (one INSERT per transaction), run with synchronous_commit=on, so every
-- transaction waits for its WAL flush like a send's. send.sh and group.sh run it beside their send pairs.
INSERT INTO bench_floor_rows (body) VALUES ('hello from the bench');
