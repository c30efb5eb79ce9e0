-- Conversation entries are updated on every peer send (the sender's read position and both sides' last_seq,
-- last_ts and order_key), so whether those updates are HOT decides much of a send's cost.
--
-- `conversations_listing` (0006) indexed order_key, which every send changes: no entry update could be HOT, and each
-- one added an entry to both of the table's indexes. The list never used it: since 0009 it orders by the effective
-- order key (ConversationStore.orderKey, a CASE over follows_group and the group's head), which a btree on the
-- stored column cannot produce, and it finds the user's entries by the primary key's (app_id, user_id) prefix.
-- Measured on the send bench (random peer pairs, 32 clients): 2,408 of 318,388 entry updates were HOT with the
-- index; the index had grown to 2,120 pages for 2,450 rows.
DROP INDEX conversations_listing;

-- Room on each page for the new version of a row, so updates stay HOT between prunes (applies to pages written
-- from now on).
ALTER TABLE conversations SET (fillfactor = 70);
ALTER TABLE conversation_seqs SET (fillfactor = 70);
