-- Targeted group messages (docs/messages.md#targeted-group-messages): a group message sent with `visible_to` is seen
-- only by the listed members and its sender. NULL (every message before this migration, and every untargeted one)
-- means the whole audience of the conversation; readers add `visible_to IS NULL OR <viewer> = ANY(visible_to)` beside
-- the `suppressed` rule. Additive: the previous release neither writes nor reads the column.
ALTER TABLE messages ADD COLUMN visible_to text[];
