-- Offline push rules and push devices (API.md §6). Both hang off the user row, so a hard delete of the user
-- removes them with it.

CREATE TABLE devices (
    app_id       text NOT NULL,
    user_id      text NOT NULL,
    device_id    text NOT NULL,
    platform     text NOT NULL,
    provider     text NOT NULL,
    push_key     text NOT NULL,
    push_app_id  text NOT NULL,              -- the device's bundle id / package (`app_id` in the Device JSON)
    voip         boolean NOT NULL DEFAULT false,
    apptype      int NOT NULL DEFAULT 1,
    lang         text NOT NULL DEFAULT '',
    created_at   bigint NOT NULL,
    updated_at   bigint NOT NULL,
    last_push_at bigint,
    PRIMARY KEY (app_id, user_id, device_id),
    -- A push key belongs to one user (§6: registering it for another user moves it).
    UNIQUE (app_id, provider, push_app_id, push_key),
    FOREIGN KEY (app_id, user_id) REFERENCES users (app_id, user_id) ON DELETE CASCADE
);
-- Listing (created_at asc, device_id) and eviction (least recently updated) of one user's devices.
CREATE INDEX devices_user_created ON devices (app_id, user_id, created_at, device_id);

CREATE TABLE push_rules (
    app_id                                text NOT NULL,
    user_id                               text NOT NULL,
    online_platforms                      text[] NOT NULL DEFAULT '{}',
    not_to_receive_offline_push_platforms text[] NOT NULL DEFAULT '{}',
    updated_at                            bigint NOT NULL,
    PRIMARY KEY (app_id, user_id),
    FOREIGN KEY (app_id, user_id) REFERENCES users (app_id, user_id) ON DELETE CASCADE
);
