-- Friends and friend applications (API.md §7). Every row references users on both sides, so a hard user delete
-- removes the user's friend entries and applications in both directions.

CREATE TABLE friends (
    app_id     text NOT NULL,
    user_id    text NOT NULL,          -- owner of the list
    friend_id  text NOT NULL,
    alias      text NOT NULL DEFAULT '',
    attributes jsonb NOT NULL DEFAULT '{}',
    wording    text NOT NULL DEFAULT '',
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    PRIMARY KEY (app_id, user_id, friend_id),
    FOREIGN KEY (app_id, user_id) REFERENCES users ON DELETE CASCADE,
    FOREIGN KEY (app_id, friend_id) REFERENCES users ON DELETE CASCADE
);
-- Listing: by created_at desc, then friend_id desc (walked backwards).
CREATE INDEX friends_listing ON friends (app_id, user_id, created_at, friend_id);
-- The reverse entry (check `both`) and the cascade from a hard delete of the friend look rows up by friend_id.
CREATE INDEX friends_friend ON friends (app_id, friend_id);

CREATE TABLE friend_applications (
    app_id         text NOT NULL,
    application_id text NOT NULL,
    from_id        text NOT NULL,          -- applicant
    to_id          text NOT NULL,          -- respondent
    wording        text NOT NULL DEFAULT '',
    alias          text NOT NULL DEFAULT '',    -- the applicant's alias for `to`, applied on accept
    attributes     jsonb NOT NULL DEFAULT '{}', -- the applicant's attributes for `to`, applied on accept
    push           jsonb,                  -- PushConfig of the send, for the push bridge
    response_push  jsonb,                  -- PushConfig of the accept or reject
    state          text NOT NULL CHECK (state IN ('waiting', 'accepted', 'rejected', 'expired')),
    created_at     bigint NOT NULL,
    updated_at     bigint NOT NULL,
    expires_at     bigint NOT NULL,
    PRIMARY KEY (app_id, application_id),
    FOREIGN KEY (app_id, from_id) REFERENCES users ON DELETE CASCADE,
    FOREIGN KEY (app_id, to_id) REFERENCES users ON DELETE CASCADE
);
-- At most one waiting application from -> to (a repeated send updates it).
CREATE UNIQUE INDEX friend_applications_waiting ON friend_applications (app_id, from_id, to_id) WHERE state = 'waiting';
-- Listing sent / received by created_at desc, then application_id desc; both serve the cascades.
CREATE INDEX friend_applications_sent ON friend_applications (app_id, from_id, created_at, application_id);
CREATE INDEX friend_applications_received ON friend_applications (app_id, to_id, created_at, application_id);
-- The expiry timer scans waiting applications of every app by due time.
CREATE INDEX friend_applications_due ON friend_applications (expires_at) WHERE state = 'waiting';
