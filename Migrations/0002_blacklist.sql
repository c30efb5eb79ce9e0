-- Blacklists (API.md §8): one row per (owner, blocked user). Both sides reference users, so a hard user delete
-- removes the user's entries in both directions.

CREATE TABLE blacklist (
    app_id     text NOT NULL,
    user_id    text NOT NULL,               -- the owner (blocker)
    blocked_id text NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (app_id, user_id, blocked_id),
    FOREIGN KEY (app_id, user_id) REFERENCES users ON DELETE CASCADE,
    FOREIGN KEY (app_id, blocked_id) REFERENCES users ON DELETE CASCADE
);
-- Listing: by created_at desc, then blocked_id desc (walked backwards).
CREATE INDEX blacklist_listing ON blacklist (app_id, user_id, created_at, blocked_id);
-- The cascade from a hard delete of the blocked user looks rows up by blocked_id.
CREATE INDEX blacklist_blocked ON blacklist (app_id, blocked_id);
