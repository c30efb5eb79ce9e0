-- Apps, keys, users, the event log and idempotency keys: the core every domain builds on.
-- Times are bigint milliseconds since the Unix epoch on the server clock (API.md §1.1, §17).

CREATE TABLE apps (
    app_id       text PRIMARY KEY,
    name         text NOT NULL,
    settings     jsonb NOT NULL,
    token_secret bytea NOT NULL,            -- HS256 key of the app's user tokens; never leaves the server
    created_at   bigint NOT NULL,
    updated_at   bigint NOT NULL
);
CREATE INDEX apps_created ON apps (created_at, app_id);

CREATE TABLE app_keys (
    app_id       text NOT NULL REFERENCES apps ON DELETE CASCADE,
    key_id       text NOT NULL,
    name         text NOT NULL DEFAULT '',
    key_hash     text NOT NULL UNIQUE,      -- SHA-256 (hex) of the whole key; the key itself is never stored
    prefix       text NOT NULL,
    created_at   bigint NOT NULL,
    last_used_at bigint,
    revoked_at   bigint,
    PRIMARY KEY (app_id, key_id)
);

-- One row per app: its event-log head (the lock that orders event ids) and trim point.
CREATE TABLE event_heads (
    app_id     text PRIMARY KEY REFERENCES apps ON DELETE CASCADE,
    head       bigint NOT NULL DEFAULT 0,
    trim_point bigint NOT NULL DEFAULT 0
);

CREATE TABLE events (
    app_id     text NOT NULL,
    id         bigint NOT NULL,
    type       text NOT NULL,
    created_at bigint NOT NULL,
    data       text NOT NULL,               -- the event's `data` JSON, byte for byte as delivered
    audience   text[] NOT NULL DEFAULT '{}',
    group_id   text,
    room_id    text,
    order_key  text NOT NULL,
    PRIMARY KEY (app_id, id)
);
CREATE INDEX events_audience ON events USING gin (audience);

CREATE TABLE users (
    app_id           text NOT NULL REFERENCES apps ON DELETE CASCADE,
    user_id          text NOT NULL,
    name             text NOT NULL DEFAULT '',
    avatar_url       text NOT NULL DEFAULT '',
    extended_data    text NOT NULL DEFAULT '',
    created_at       bigint NOT NULL,
    updated_at       bigint NOT NULL,
    muted_until      bigint NOT NULL DEFAULT 0,
    banned_until     bigint NOT NULL DEFAULT 0,
    ban_reason       text NOT NULL DEFAULT '',
    deleted_at       bigint,
    token_generation bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (app_id, user_id)
);

CREATE TABLE idempotency_keys (
    app_id     text NOT NULL,
    scope      text NOT NULL,               -- "app", "admin" or "user:<user_id>"
    key        text NOT NULL,
    method     text NOT NULL,
    path       text NOT NULL,
    body_hash  text NOT NULL,
    status     int,                         -- null while the first request runs
    headers    text,
    body       bytea,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (app_id, scope, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
