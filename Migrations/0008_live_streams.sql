-- Open user streams (API.md §14.2) and the nodes holding them, so presence (§5) is right with any number of nodes:
-- a user is online while it has a presence-counting row here; its platforms are those rows' platforms.
--
-- Each node refreshes its live_nodes row every few seconds (wall-clock ms); the rows of a node not seen for 30 s
-- (it crashed or was killed) are removed by any other node, which recomputes those users' statuses.

CREATE TABLE live_nodes (
    node_id text PRIMARY KEY,
    seen_at bigint NOT NULL
);

CREATE TABLE user_streams (
    app_id          text NOT NULL,
    user_id         text NOT NULL,
    stream_id       text NOT NULL,          -- '<node_id>:<n>'
    node_id         text NOT NULL,
    platform        text NOT NULL,
    counts_presence boolean NOT NULL,
    opened_at       bigint NOT NULL,
    PRIMARY KEY (app_id, user_id, stream_id),
    FOREIGN KEY (app_id, user_id) REFERENCES users ON DELETE CASCADE
);
CREATE INDEX user_streams_node ON user_streams (node_id);
