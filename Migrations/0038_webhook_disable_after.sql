-- Auto-disable waits for a failure streak to last (docs/webhooks.md#retries): an endpoint is switched off when its
-- consecutive failed attempts reach `disable_after_failures` and the first of them is at least `disable_after_s` old,
-- so a receiver down for minutes under light traffic is not switched off. `first_failure_at` is when the current
-- streak began (server clock, ms; meaningful only while consecutive_failures > 0: a binary that predates this column
-- resets the count without clearing it, and the streak's start is taken anew whenever the count was 0).
ALTER TABLE webhooks
    ADD COLUMN disable_after_s int NOT NULL DEFAULT 86400,
    ADD COLUMN first_failure_at bigint;
