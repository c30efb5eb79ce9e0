-- The naive hot-counter send: every client on ONE counter row (bench_counter, id 1), one transaction per send
-- that takes the next number and writes a row with it (bench_counter_rows: seq bigint primary key, body text).
-- Tables created and dropped by bench/lib.sh reference_tables; run with synchronous_commit=on. Each transaction
-- holds the counter row's lock from the UPDATE to its durable COMMIT, so the sends are serialised by it.
-- send.sh runs it beside the hot pair (every connection u1 -> u2).
BEGIN;
UPDATE bench_counter SET n = n + 1 WHERE id = 1 RETURNING n \gset
INSERT INTO bench_counter_rows (seq, body) VALUES (:n, 'hello from the bench');
END;
