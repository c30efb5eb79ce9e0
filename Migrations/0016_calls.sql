-- Calls (API.md §13): call invitations refereed by the server — who may answer, when an invitation times out, when
-- the call ends. Signalling only; media is out of scope.
--
-- * Every change of a call (create, cancel, accept, reject, invite-more, join, quit, end, a timer, a stream opening,
--   a hard delete) locks the call row first and re-reads its users under the lock, so two racing answers end in one
--   outcome. Changes that also lock user rows (create and invite-more lock the invitees, a stream opening and a hard
--   delete lock their user) take the user rows before the call row.
-- * Timers: `timeout_at` (invited_at + timeout_s) is set while a user is pending, `check_at` (invited_at + 5 s) while a
--   `not_received_check` invitation is still `inviting`; both are cleared by the change that ends them. The timer
--   claims calls with due users under `FOR UPDATE SKIP LOCKED`, so it fires each item once across nodes and restarts.
-- * `position` orders a call's users (caller first, then by first invitation or join); a re-invited user keeps it.

CREATE TABLE calls (
    app_id             text NOT NULL REFERENCES apps ON DELETE CASCADE,
    call_id            text NOT NULL,
    mode               text NOT NULL,            -- general | advanced
    caller_id          text NOT NULL,
    state              text NOT NULL,            -- started | ended
    end_reason         text,                     -- resolved | ended | empty
    extended_data      text NOT NULL DEFAULT '',
    timeout_s          int NOT NULL,
    not_received_check boolean NOT NULL DEFAULT false,
    created_at         bigint NOT NULL,
    ended_at           bigint,
    PRIMARY KEY (app_id, call_id)
);
-- /v1/stats calls_active.
CREATE INDEX calls_started ON calls (app_id) WHERE state = 'started';

CREATE TABLE call_users (
    app_id          text NOT NULL,
    call_id         text NOT NULL,
    user_id         text NOT NULL,
    position        int NOT NULL,
    state           text NOT NULL,
    inviter_id      text,
    extended_data   text NOT NULL DEFAULT '',
    invited_at      bigint,
    updated_at      bigint NOT NULL,
    accepted_at     bigint,
    quit_at         bigint,
    -- The call's created_at, for GET /v1/users/{user_id}/calls (by created_at desc, then call_id).
    call_created_at bigint NOT NULL,
    timeout_at      bigint,                  -- while pending: invited_at + timeout_s·1000
    check_at        bigint,                  -- while inviting with not_received_check: invited_at + 5000
    PRIMARY KEY (app_id, call_id, user_id),
    FOREIGN KEY (app_id, call_id) REFERENCES calls ON DELETE CASCADE
);
CREATE INDEX call_users_list ON call_users (app_id, user_id, call_created_at DESC, call_id COLLATE "C" DESC);
-- A stream opening marks the user's `inviting` / `not_yet_received` invitations `received`.
CREATE INDEX call_users_unreceived ON call_users (app_id, user_id) WHERE state IN ('inviting', 'not_yet_received');
-- The timers, across apps.
CREATE INDEX call_users_timeout_due ON call_users (timeout_at) WHERE timeout_at IS NOT NULL;
CREATE INDEX call_users_check_due ON call_users (check_at) WHERE check_at IS NOT NULL;
