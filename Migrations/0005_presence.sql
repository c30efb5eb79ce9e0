-- Presence (API.md §5): one status row per user (created on its first write; a user without a row reads as the
-- defaults) and one row per (subscriber, target) status subscription. Both tables reference users, so a hard user
-- delete removes its status and its subscriptions in both directions.

CREATE TABLE user_statuses (
    app_id                        text    NOT NULL,
    user_id                       text    NOT NULL,
    -- Written by the live user streams (API.md §14.2), not by the custom-status routes.
    online_status                 text    NOT NULL DEFAULT 'offline' CHECK (online_status IN ('online', 'offline', 'logout')),
    online_platforms              text[]  NOT NULL DEFAULT '{}',
    last_online_status_updated_at bigint  NOT NULL DEFAULT 0,
    -- '' when unset; a non-empty status always has an expiry (custom_status_expires_at > 0).
    custom_status                 text    NOT NULL DEFAULT '',
    custom_status_expires_at      bigint  NOT NULL DEFAULT 0,
    last_custom_status_updated_at bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (app_id, user_id),
    FOREIGN KEY (app_id, user_id) REFERENCES users ON DELETE CASCADE
);
-- The custom-status expiry timer looks for due statuses across all apps.
CREATE INDEX user_statuses_custom_expiry ON user_statuses (custom_status_expires_at) WHERE custom_status <> '';

CREATE TABLE status_subscriptions (
    app_id        text   NOT NULL,
    subscriber_id text   NOT NULL,
    target_id     text   NOT NULL,
    created_at    bigint NOT NULL,
    expires_at    bigint NOT NULL,
    PRIMARY KEY (app_id, subscriber_id, target_id),
    FOREIGN KEY (app_id, subscriber_id) REFERENCES users ON DELETE CASCADE,
    FOREIGN KEY (app_id, target_id) REFERENCES users ON DELETE CASCADE
);
-- Audience of user.status_updated (the target's unexpired subscribers) and the cascade from the target's delete.
CREATE INDEX status_subscriptions_target ON status_subscriptions (app_id, target_id, expires_at);
-- The subscription expiry timer deletes due rows across all apps.
CREATE INDEX status_subscriptions_expiry ON status_subscriptions (expires_at);
