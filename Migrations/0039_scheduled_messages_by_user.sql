-- `GET /v1/scheduled_messages?user_id=`: the user's rows newest first from their own index. Without it the list
-- walked the app's rows (sent ones are kept) and filtered by user: 139 ms for a user with none among 1,000,000 rows
-- (generic plan), 0.06 ms with it.
CREATE INDEX scheduled_messages_user ON scheduled_messages (app_id, user_id, created_at DESC, scheduled_id DESC);
