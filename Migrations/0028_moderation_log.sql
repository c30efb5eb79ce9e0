-- The moderation log (docs/moderation.md#the-moderation-log): one row per moderation action from every source — report
-- actions, automatic escalation, bulk removals, and mute/unmute/ban/unban/kick/delete done through the user routes —
-- written in the transaction that does the action, so the log never shows an action that did not happen.
CREATE TABLE moderation_actions (
    app_id      text   NOT NULL,
    action_id   bigint GENERATED ALWAYS AS IDENTITY,
    action      text   NOT NULL,
    target_type text   NOT NULL,
    target_id   text   NOT NULL,
    params      jsonb  NOT NULL DEFAULT '{}',
    moderator   text,
    source      text   NOT NULL,
    at          bigint NOT NULL,
    PRIMARY KEY (app_id, action_id)
);
-- Newest first, by app, by target user and by moderator.
CREATE INDEX moderation_actions_at ON moderation_actions (app_id, at DESC, action_id DESC);
CREATE INDEX moderation_actions_target ON moderation_actions (app_id, target_id, at DESC, action_id DESC);
