\set n random(1, 1000)
SELECT user_id, name, avatar_url, extended_data, created_at, updated_at, muted_until, banned_until, ban_reason, deleted_at, token_generation FROM users WHERE app_id = 'default' AND user_id = 'u' || :n;
