-- Reaction counts per type (API.md §11.6). A reaction change rebuilds its message's summary column under the message's
-- row lock; reading it from this table (at most 50 rows, plus 10 reactors a type from the users-list index) keeps that
-- locked part short, where aggregating every reaction of the message grew with the message (bench/RESULTS.md "message
-- lifecycle": reactions on one hot message ran at 0.1× of sends). Kept by parley_reaction_change in the transaction of
-- each change; a revoke or delete for everyone drops a message's rows with its reactions.
CREATE TABLE message_reaction_types (
    app_id        text NOT NULL,
    message_id    text NOT NULL,
    reaction_type text NOT NULL,
    count         int NOT NULL,
    first_at      bigint NOT NULL,         -- the earliest current reacted_at of the type: the summary's order
    PRIMARY KEY (app_id, message_id, reaction_type),
    FOREIGN KEY (app_id, message_id) REFERENCES messages (app_id, message_id) ON DELETE CASCADE
);

INSERT INTO message_reaction_types (app_id, message_id, reaction_type, count, first_at)
SELECT app_id, message_id, reaction_type, count(*), min(reacted_at)
FROM message_reactions
GROUP BY app_id, message_id, reaction_type;
