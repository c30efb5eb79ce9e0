-- bench/search.sh: 1,000,000 stored texts for app :'app' (users u1..u2000 exist), written straight into the tables.
-- 2,000 peer conversations × 200 messages (u<n> with u<n+1>) and 60 groups × 10,000 (g1..g60, 200 members each,
-- u1 a member of g1..g5); half the texts 6–13 English words from a 180-word vocabulary, half 6–19 random CJK
-- characters (U+4E00 + 0…2499). Messages are one minute apart in each conversation; the conversations interleave.
CREATE TEMP TABLE words AS SELECT w, row_number() OVER () AS n FROM unnest(string_to_array(
 'the meeting tomorrow project report budget coffee lunch dinner weekend holiday travel flight hotel ticket price order delivery package payment invoice account password login server database backup deploy release update version feature issue ticket customer support team manager office remote schedule calendar reminder birthday party gift photo video music movie game score match player football basketball weather rain sunny cloudy snow cold warm hot summer winter spring autumn morning evening night today yesterday week month year happy sorry thanks please hello goodbye welcome great good nice cool awesome amazing terrible problem solution question answer idea plan goal result review draft final approve reject cancel confirm check send receive call message email phone address location map station train bus car bike walk run gym health doctor hospital school class homework exam teacher student book library paper note document file folder share link download upload cloud storage memory laptop mobile tablet screen keyboard mouse camera battery charger cable network wifi signal internet website app install settings profile avatar status online offline busy free available',
 ' ')) w;

INSERT INTO groups (app_id, group_id, owner_id, join_mode, invite_mode, be_invite_mode, max_members, member_count, created_at, updated_at)
SELECT :'app', 'g' || i, 'u' || (i * 97 % 2000 + 1), 'any', 'any', 'none', 2000, 200, 0, 0 FROM generate_series(1, 60) i;
INSERT INTO group_members (app_id, group_id, user_id, role, enter_type, joined_at)
SELECT :'app', 'g' || g, 'u' || ((g * 97 + k) % 2000 + 1), CASE WHEN k = 0 THEN 1 ELSE 3 END, 'invited', 0
FROM generate_series(1, 60) g, generate_series(0, 199) k;
INSERT INTO group_members (app_id, group_id, user_id, role, enter_type, joined_at)
SELECT :'app', 'g' || g, 'u1', 3, 'invited', 0 FROM generate_series(1, 5) g ON CONFLICT DO NOTHING;

-- search_text as the send statement writes it (Migrations/0022).
INSERT INTO messages (app_id, conv_type, conv_id, seq, message_id, sender, recipient, type, body, timestamp, search_text)
SELECT l.*, parley_search_text(l.type, l.body) FROM (
SELECT :'app', c.conv_type, c.conv_id, s.seq, 'mb' || lpad(to_hex(c.n::bigint * 100000 + s.seq), 12, '0'),
       CASE WHEN c.conv_type = 'group' OR s.seq % 2 = 0 THEN c.a ELSE c.b END,
       CASE WHEN c.conv_type = 'group' THEN c.conv_id WHEN s.seq % 2 = 0 THEN c.b ELSE c.a END, 1 AS type,
       json_build_object('text', CASE WHEN (c.n + s.seq) % 2 = 0 THEN
           (SELECT string_agg(wd.w, ' ') FROM generate_series(1, 6 + (s.seq % 8)) k
              JOIN words wd ON wd.n = 1 + ((hashint8(c.n::bigint * 7919 + s.seq * 31 + k) & 2147483647) % 180))
         ELSE (SELECT string_agg(chr(19968 + ((hashint8(c.n::bigint * 104729 + s.seq * 17 + k) & 2147483647) % 2500)::int), '')
               FROM generate_series(1, 6 + (s.seq % 14)) k) END)::text AS body,
       1700000000000 + c.n::bigint * 37 + s.seq::bigint * 60000
FROM (SELECT n, 'peer' AS conv_type,
             CASE WHEN 'u' || n < 'u' || (n + 1) THEN 'u' || n || ' u' || (n + 1) ELSE 'u' || (n + 1) || ' u' || n END AS conv_id,
             'u' || n AS a, 'u' || (n + 1) AS b, 200 AS len
      FROM generate_series(1, 1999) n
      UNION ALL
      SELECT 100000 + g, 'group', 'g' || g, 'u' || (g * 97 % 2000 + 1), NULL, 10000 FROM generate_series(1, 60) g) c,
     LATERAL generate_series(1, c.len) s(seq)) l;
INSERT INTO conversation_seqs (app_id, conv_type, conv_id, last_seq, last_ts)
SELECT app_id, conv_type, conv_id, max(seq), max(timestamp) FROM messages WHERE app_id = :'app' GROUP BY 1, 2, 3
ON CONFLICT DO NOTHING;
VACUUM ANALYZE;
SELECT count(*) FROM messages WHERE app_id = :'app';
