-- Groups (API.md §9.1–§9.7): the group row, one row per member, and join / invite applications.
--
-- Every membership change locks the group row first (SELECT … FOR UPDATE), so `member_count` and the
-- `max_members` check are exact under concurrent joins. A group is never deleted: dismissal sets `dismissed_at`
-- and keeps the member rows (the members at dismissal), so its id stays taken (409 6000524) and GET still answers.
-- Group conversations (§12) and group messages (§11) reference `groups` / `group_members` by (app_id, group_id[,
-- user_id]); a member's read position belongs to its conversations row, keyed like its group_members row.

CREATE TABLE groups (
    app_id          text NOT NULL REFERENCES apps ON DELETE CASCADE,
    group_id        text NOT NULL,
    name            text NOT NULL DEFAULT '',
    avatar_url      text NOT NULL DEFAULT '',
    notice          text NOT NULL DEFAULT '',
    extended_data   text NOT NULL DEFAULT '',
    owner_id        text NOT NULL,          -- the last owner once dismissed
    join_mode       text NOT NULL CHECK (join_mode IN ('any', 'auth', 'forbid')),
    invite_mode     text NOT NULL CHECK (invite_mode IN ('any', 'admin')),
    be_invite_mode  text NOT NULL CHECK (be_invite_mode IN ('none', 'auth')),
    max_members     int NOT NULL,           -- as requested: 0 = the app's max_group_members
    member_count    int NOT NULL,
    is_big_group    boolean NOT NULL DEFAULT false,
    mute_mode       text NOT NULL DEFAULT 'none' CHECK (mute_mode IN ('none', 'normal', 'all', 'custom')),
    mute_expires_at bigint NOT NULL DEFAULT 0,       -- 0 none, -1 permanent, else ms
    mute_roles      int[] NOT NULL DEFAULT '{}',
    attributes      jsonb NOT NULL DEFAULT '{}',     -- §9.6, at most 10 keys
    created_at      bigint NOT NULL,
    updated_at      bigint NOT NULL,
    dismissed_at    bigint,
    PRIMARY KEY (app_id, group_id)
);
-- GET /v1/groups: by created_at desc, then group_id desc (walked backwards).
CREATE INDEX groups_listing ON groups (app_id, created_at, group_id);

CREATE TABLE group_members (
    app_id      text NOT NULL,
    group_id    text NOT NULL,
    user_id     text NOT NULL,
    role        int NOT NULL CHECK (role BETWEEN 1 AND 10000),
    nickname    text NOT NULL DEFAULT '',
    muted_until bigint NOT NULL DEFAULT 0,           -- 0 none, -1 permanent, else ms
    enter_type  text NOT NULL CHECK (enter_type IN ('created', 'join_apply', 'joined', 'invited', 'invite_apply')),
    joined_at   bigint NOT NULL,
    operated_by text,                                -- inviter or approver
    alias       text NOT NULL DEFAULT '',            -- the member's own alias for the group (§12 group conversations)
    PRIMARY KEY (app_id, group_id, user_id),
    FOREIGN KEY (app_id, group_id) REFERENCES groups ON DELETE CASCADE,
    -- The user service removes a hard-deleted user from its groups first (owner continuity, §9.3).
    FOREIGN KEY (app_id, user_id) REFERENCES users ON DELETE CASCADE
);
-- The member list (role asc, joined_at asc, user_id asc) and owner continuity (earliest admin / member).
CREATE INDEX group_members_listing ON group_members (app_id, group_id, role, joined_at, user_id);
-- A user's groups: by joined_at desc, then group_id desc.
CREATE INDEX group_members_user ON group_members (app_id, user_id, joined_at, group_id);

CREATE TABLE group_applications (
    app_id         text NOT NULL,
    application_id text NOT NULL,
    type           text NOT NULL CHECK (type IN ('join', 'invite')),
    state          text NOT NULL CHECK (state IN ('waiting', 'accepted', 'rejected', 'expired')),
    group_id       text NOT NULL,
    user_id        text NOT NULL,                    -- applicant (join) or invitee (invite)
    inviter_id     text,                             -- invite only
    wording        text NOT NULL DEFAULT '',
    operated_by    text,                             -- who accepted or rejected
    response_push  jsonb,                            -- PushConfig of the accept or reject, for the push bridge
    created_at     bigint NOT NULL,
    updated_at     bigint NOT NULL,
    expires_at     bigint NOT NULL,
    PRIMARY KEY (app_id, application_id),
    FOREIGN KEY (app_id, group_id) REFERENCES groups ON DELETE CASCADE,
    FOREIGN KEY (app_id, user_id) REFERENCES users ON DELETE CASCADE
);
-- At most one waiting application of each type per (group, user): a repeated join or invite returns it.
CREATE UNIQUE INDEX group_applications_waiting ON group_applications (app_id, group_id, user_id, type) WHERE state = 'waiting';
-- Listings by created_at desc, then application_id desc: per group, per applicant/invitee, per inviter.
CREATE INDEX group_applications_group ON group_applications (app_id, group_id, created_at, application_id);
CREATE INDEX group_applications_user ON group_applications (app_id, user_id, created_at, application_id);
CREATE INDEX group_applications_inviter ON group_applications (app_id, inviter_id, created_at, application_id)
    WHERE inviter_id IS NOT NULL;
-- The expiry timer scans waiting applications of every app by due time.
CREATE INDEX group_applications_due ON group_applications (expires_at) WHERE state = 'waiting';
