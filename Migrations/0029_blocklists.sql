-- Blocklists (docs/blocklists.md): named lists of words, regular expressions, domains or e-mail addresses per app,
-- each with the action a match takes and the content it applies to. Entries are stored normalised (as matched).
CREATE TABLE blocklists (
    app_id     text    NOT NULL REFERENCES apps ON DELETE CASCADE,
    name       text    NOT NULL,
    type       text    NOT NULL,
    action     text    NOT NULL,
    applies_to text[]  NOT NULL,
    entries    text[]  NOT NULL,
    -- The app's blocklist version that last wrote the list: a node's compiled copy is reused while it matches.
    revision   bigint  NOT NULL,
    created_at bigint  NOT NULL,
    updated_at bigint  NOT NULL,
    PRIMARY KEY (app_id, name)
);

-- One row per app with blocklists: bumped by every create, change and delete, so each node checks one small row
-- (docs/blocklists.md#caching-and-propagation) instead of reading the lists again.
CREATE TABLE blocklist_versions (
    app_id  text   NOT NULL REFERENCES apps ON DELETE CASCADE,
    version bigint NOT NULL,
    PRIMARY KEY (app_id)
);
