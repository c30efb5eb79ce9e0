-- Jobs (docs/jobs.md): long work the API answers with 202 and runs in the background, in steps, on any node.
--
-- * A node claims a runnable job (queued, or running with its lease expired: its node died or stopped) with
--   `FOR UPDATE SKIP LOCKED`, taking the lease (`node`, `attempt` + 1, `lease_until` on the database's clock).
-- * Each step locks the row, checks that the lease is still its own (`attempt`), and commits its effects, the new
--   `checkpoint` and the progress in one transaction, renewing the lease; a node that took over resumes from the last
--   committed checkpoint, so no step's effects are written twice.
-- * `DELETE` cancels a queued job at once and marks a running one (`cancel_requested`); the runner stops before its
--   next step.
CREATE TABLE jobs (
    app_id           text   NOT NULL REFERENCES apps ON DELETE CASCADE,
    job_id           text   NOT NULL,
    kind             text   NOT NULL,
    state            text   NOT NULL,            -- queued | running | succeeded | failed | cancelled
    params           jsonb  NOT NULL DEFAULT '{}',
    checkpoint       jsonb  NOT NULL DEFAULT '{}',
    progress_done    bigint NOT NULL DEFAULT 0,
    progress_total   bigint,
    result           jsonb,
    problem          jsonb,
    created_at       bigint NOT NULL,
    started_at       bigint,
    finished_at      bigint,
    node             text,                       -- the node holding the lease
    attempt          int    NOT NULL DEFAULT 0,  -- claims so far: a step commits only under the claim it runs for
    lease_until      bigint,                     -- database-clock ms
    cancel_requested boolean NOT NULL DEFAULT false,
    PRIMARY KEY (app_id, job_id)
);
-- GET /v1/jobs: newest first.
CREATE INDEX jobs_created ON jobs (app_id, created_at DESC, job_id DESC);
-- The runners' claim and the metrics gauge: the jobs not finished.
CREATE INDEX jobs_unfinished ON jobs (app_id, created_at, job_id) WHERE state IN ('queued', 'running');
