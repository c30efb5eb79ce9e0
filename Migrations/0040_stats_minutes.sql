-- Per-minute activity figures of each app, for the operations console's charts (GET /v1/stats/series,
-- docs/operations.md#activity-series). Additive: two new tables, so the previous release's binary keeps working (it
-- neither reads nor writes them).
--
-- * `stats_minutes` — one row per app, minute and metric, written only when the figure is not zero (a minute the
--   sampler ran in without a row reads as 0). `minute` is the start of the minute on the server clock (ms, a multiple
--   of 60000). The cluster's one sampler of the minute writes the gauges and the counts it reads from the database;
--   every node adds its own HTTP error counts (`http_4xx`, `http_5xx`) with an upsert that adds. Rows older than 7
--   days are deleted by the sampler, through `stats_minutes_minute`.
CREATE TABLE stats_minutes (
    app_id text NOT NULL REFERENCES apps ON DELETE CASCADE,
    minute bigint NOT NULL,
    metric text NOT NULL,
    value  double precision NOT NULL,
    PRIMARY KEY (app_id, minute, metric)
);
CREATE INDEX stats_minutes_minute ON stats_minutes (minute);

-- * `stats_samples` — the minutes the sampler ran in, one row each (cluster-wide, not per app): a series bucket without
--   a sample reads as null, not 0. The rows are also the sampler's claim: under a transaction advisory lock, a node
--   samples only when no mark of this minute or the one before is less than most of an interval old, so one node of
--   the cluster samples per interval (Sources/Parley/Ops/StatsSampler.swift).
CREATE TABLE stats_samples (
    minute     bigint PRIMARY KEY,
    sampled_at bigint NOT NULL,
    node       text NOT NULL
);
