-- The SQL of one peer text send (API.md §11.1), one send per transaction: what the node's writer runs for a batch
-- (MessageWriter.write): BEGIN; MessageWrite.statement (Sources/ParleyDomains/Messages/Sending/MessageWrite.swift) with the batch's
-- items as $1 and its combine snapshots as $2; EventLog.appendNumbered (Sources/ParleyAPI/Events/EventLog.swift) of the batch's
-- message.sent events, numbered under the app's head lock taken once per batch; COMMIT. Here the batch is this one send, with the same kind of item the
-- server builds: random users u1..u50 (send.sh's hot-pair run rewrites the \set lines to u1 -> u2), a fresh message id and client_msg_id
-- per transaction, every check on (checks 2), no combine; its event's data is a constant message.sent
-- JSON of the server's size (569 bytes; colons written \x3a, or pgbench would read a colon and the word after it as
-- a variable). The event gets its id at once, under the head lock, as the writer's do.
-- A template: bench/py/send_sql.py pastes both statements in as the release binary prints them (`parley sql send
-- <parts>`, `parley sql events`) when the bench runs (each @<statement>( ... ); block, with `$n := ` the value of its
-- parameter $n; the writer's statement names the parts of its batch in brackets), checks the item's names against the
-- statement's json_to_recordset columns, and writes the pgbench script into the run's temporary directory; pgbench
-- runs that, never this file. No copy of the statements is kept here, so the bench follows the server's SQL; when the
-- statement's parameters or item columns change, send_sql.py stops the bench and says what to change here.
\set a random(1, 50)
\set d random(1, 49)
\set b (:a + :d - 1) % 50 + 1
\set r random(1, 9000000000000000000)
BEGIN;
@MessageWrite.statement[peer,keyed,checked,policy](
$1 := json_build_array(json_build_object(
    'ord', 0, 'app_id', 'default', 'now', (extract(epoch from now()) * 1000)::bigint, 'conv_type', 'peer',
    'conv_id', least('u' || :a, 'u' || :b) || ' ' || greatest('u' || :a, 'u' || :b),
    'sender', 'u' || :a, 'recipient', 'u' || :b, 'message_id', 'p' || :r, 'client_msg_id', 'c' || :r,
    'content_hash', '24775f8f3399bd94c94f7150c1d7b07e35dd89494209730ed255371ccabff411', 'stored', true, 'type', 1,
    'body', '{"text":"hello from the bench"}', 'extended_data', '', 'mention_ids', json_build_array(),
    'mention_all', false, 'mention_notify', true, 'reply', NULL, 'root_message_id', NULL, 'reply_missing', false,
    'priority', 2, 'need_receipt', false, 'no_unread', false, 'repeat_count', 1, 'push', NULL, 'checks', 2,
    'blacklist_error', false, 'friend_only', false, 'sensitive_reject', false, 'hook_drop', false, 'combine_id', NULL))
);
@EventLog.appendNumbered(
$1 := 'default',
$2 := 1,
$3 := (extract(epoch from now()) * 1000)::bigint,
$4 := json_build_array(json_build_object('ord', 1, 'type', 'message.sent', 'data', (E'{"message"\x3a{"message_id"\x3a"m0Vcb0nlwryNzcRwVYlRdXk","client_msg_id"\x3a"w1-1764530000-1","type"\x3a1,"conversation_type"\x3a"peer","from"\x3a"u1","to"\x3a"u2","seq"\x3a1,"timestamp"\x3a1796167266480,"body"\x3a{"text"\x3a"hello from the bench"},"extended_data"\x3a"","mentions"\x3a{"user_ids"\x3a[],"all"\x3afalse},"reply"\x3anull,"root_message_id"\x3anull,"reply_count"\x3a0,"priority"\x3a2,"need_receipt"\x3afalse,"receipt_status"\x3a"none","no_unread"\x3afalse,"online_only"\x3afalse,"stored"\x3atrue,"repeat_count"\x3a1,"is_broadcast"\x3afalse,"edited_at"\x3anull,"editor_id"\x3anull,"edit_count"\x3a0,"pinned"\x3anull,"reactions"\x3a[],"deleted"\x3afalse}}')::json,
    'audience', ('["u' || :a || '","u' || :b || '"]')::json, 'group_id', NULL, 'room_id', NULL, 'to_group_members', false, 'order_key', E'peer\x3a' || least('u' || :a, 'u' || :b) || ' ' || greatest('u' || :a, 'u' || :b)))
);
END;
