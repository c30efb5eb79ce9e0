-- The one statement a group text send runs (MessageStore.send → parley_send_message, Migrations/0009), with the
-- same kind of arguments the server passes: a random member u1..u500 of g500, a fresh message id and client_msg_id
-- per transaction, and a Message JSON template of the server's size (colons written \x3a, so pgbench does not read
-- ":null" as a variable).
\set a random(1, 500)
\set r random(1, 9000000000000000000)
SELECT outcome, seq, ts, suppressed FROM parley_send_message('default', (extract(epoch from clock_timestamp()) * 1000)::bigint, 'group',
    'g500', 'u' || :a, 'g500', 'p' || :r, 'c' || :r,
    '5f2c9a0e5f2c9a0e5f2c9a0e5f2c9a0e5f2c9a0e5f2c9a0e5f2c9a0e5f2c9a0e', true, 1, '{"text":"hello from the bench"}', '',
    '{}'::text[], false, true, NULL, NULL, false, 2, false, false, 1, NULL, false, false, false, false,
    E'{"message_id"\x3a"m0Vd3kQ1aB2cD3eF4gH5iJ6k","client_msg_id"\x3a"w1-1764530000-1","type"\x3a1,"conversation_type"\x3a"group","from"\x3a"u1","to"\x3a"g500","seq"\x3a',
    E',"body"\x3a{"text"\x3a"hello from the bench"},"extended_data"\x3a"","mentions"\x3a{"user_ids"\x3a[],"all"\x3afalse},"reply"\x3anull,"root_message_id"\x3anull,"reply_count"\x3a0,"priority"\x3a2,"need_receipt"\x3afalse,"receipt_status"\x3a"none","no_unread"\x3afalse,"online_only"\x3afalse,"stored"\x3atrue,"repeat_count"\x3a1,"is_broadcast"\x3afalse,"edited_at"\x3anull,"editor_id"\x3anull,"edit_count"\x3a0,"pinned"\x3anull,"reactions"\x3a[],"deleted"\x3afalse',
    NULL, '{}'::text[]);
