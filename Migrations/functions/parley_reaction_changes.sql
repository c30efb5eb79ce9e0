-- A batch of reaction changes to one stored message (API.md §11.6), in order: for item i, `p_users[i]` adds
-- (`p_adds[i]`) or removes its `p_types[i]` reaction at `p_nows[i]`. Keeps message_reaction_types (Migrations/0018),
-- appends one `message.reactions_updated` per change with the summary after it, and stores the last summary in
-- `messages.reactions`. The caller has checked each user and the message's visibility, and renders the event: its data
-- is `p_event_data` followed by the summary and `}`; the other columns are the event's audience and ordering key
-- (MessageAudience).
--
-- In the database, called as a statement of its own (its own transaction), because this is the part that holds the
-- message's row lock, which every change of the message queues on (it keeps the summary, the type limit and "one
-- event per change with the counts after it" exact): the lock is held from the SELECT … FOR UPDATE below to the
-- statement's commit, with no round trip in between, and one lock and one commit serve the whole batch (the node
-- queues a message's changes and sends them here together: MessageReactions). That is also why it inserts the event
-- rows itself, as EventLog.append would (Sources/ParleyAPI/Events/EventLog.swift): keep the two inserts alike.
--
-- The per-type counts are kept in hand through the batch (three arrays, one element per type) and written to
-- message_reaction_types once at its end: updating a count row per change made one row version per change, and a
-- hot message's lookups then walked those versions.
--
-- One row per item, in order: `outcome` 0 changed; 1 no such message (unknown, unstored, a tombstone); 2 the message
-- takes no reactions (revoked, tips); 3 a new type past `p_max_types`; 4 the user already reacted so; 5 the user has
-- no such reaction. `summary` (outcome 0): the summary after the change; `viewer_summary`: the same with
-- `self_included` for `p_viewers[i]`, when that is not ''.
CREATE OR REPLACE FUNCTION parley_reaction_changes(
    p_app text, p_message text, p_users text[], p_types text[], p_nows bigint[], p_adds boolean[], p_viewers text[],
    p_max_types int, p_event_data text, p_audience text[], p_group text, p_room text, p_to_members boolean, p_order_key text)
RETURNS TABLE (outcome int, summary text, viewer_summary text)
LANGUAGE plpgsql AS $$
DECLARE
    v_message_type int;
    v_deleted boolean;
    v_removed_at bigint;
    v_types text[];
    v_counts int[];
    v_firsts bigint[];
    v_k int;
    v_stored text;
BEGIN
    SELECT m.type, m.deleted INTO v_message_type, v_deleted
    FROM messages m WHERE m.app_id = p_app AND m.message_id = p_message FOR UPDATE;
    SELECT coalesce(array_agg(t.reaction_type), '{}'), coalesce(array_agg(t.count), '{}'), coalesce(array_agg(t.first_at), '{}')
    INTO v_types, v_counts, v_firsts
    FROM message_reaction_types t WHERE t.app_id = p_app AND t.message_id = p_message;
    FOR i IN 1 .. coalesce(array_length(p_users, 1), 0) LOOP
        summary := NULL;
        viewer_summary := NULL;
        outcome := CASE WHEN v_message_type IS NULL OR v_deleted THEN 1 WHEN v_message_type IN (31, 32) THEN 2 ELSE 0 END;
        v_k := array_position(v_types, p_types[i]);
        IF outcome = 0 AND p_adds[i] THEN
            IF v_k IS NULL AND cardinality(v_types) >= p_max_types THEN
                outcome := 3;
            ELSE
                INSERT INTO message_reactions (app_id, message_id, reaction_type, user_id, reacted_at)
                VALUES (p_app, p_message, p_types[i], p_users[i], p_nows[i]) ON CONFLICT DO NOTHING;
                IF NOT FOUND THEN
                    outcome := 4;
                ELSIF v_k IS NULL THEN
                    v_types := v_types || p_types[i];
                    v_counts := v_counts || 1;
                    v_firsts := v_firsts || p_nows[i];
                ELSE
                    v_counts[v_k] := v_counts[v_k] + 1;
                    v_firsts[v_k] := least(v_firsts[v_k], p_nows[i]);
                END IF;
            END IF;
        ELSIF outcome = 0 THEN
            DELETE FROM message_reactions r
            WHERE r.app_id = p_app AND r.message_id = p_message AND r.reaction_type = p_types[i] AND r.user_id = p_users[i]
            RETURNING r.reacted_at INTO v_removed_at;
            IF NOT FOUND OR v_k IS NULL THEN
                outcome := 5;
            ELSIF v_counts[v_k] <= 1 THEN
                v_types := v_types[:v_k - 1] || v_types[v_k + 1:];
                v_counts := v_counts[:v_k - 1] || v_counts[v_k + 1:];
                v_firsts := v_firsts[:v_k - 1] || v_firsts[v_k + 1:];
            ELSE
                v_counts[v_k] := v_counts[v_k] - 1;
                -- The type's earliest reaction moves only when the removed one was it.
                IF v_removed_at <= v_firsts[v_k] THEN
                    v_firsts[v_k] := (SELECT min(r.reacted_at) FROM message_reactions r
                                      WHERE r.app_id = p_app AND r.message_id = p_message AND r.reaction_type = p_types[i]);
                END IF;
            END IF;
        END IF;
        IF outcome = 0 THEN
            summary := parley_reaction_summary(p_app, p_message, NULL, v_types, v_counts, v_firsts);
            v_stored := summary;
            IF p_viewers[i] <> '' THEN
                viewer_summary := parley_reaction_summary(p_app, p_message, p_viewers[i], v_types, v_counts, v_firsts);
            END IF;
            INSERT INTO pending_events (app_id, type, created_at, data, audience, group_id, room_id, to_group_members, order_key)
            VALUES (p_app, 'message.reactions_updated', p_nows[i], p_event_data || summary || '}', p_audience, p_group, p_room,
                    p_to_members, p_order_key);
        END IF;
        RETURN NEXT;
    END LOOP;
    IF v_stored IS NOT NULL THEN
        DELETE FROM message_reaction_types t
        WHERE t.app_id = p_app AND t.message_id = p_message AND t.reaction_type <> ALL (v_types);
        INSERT INTO message_reaction_types AS t (app_id, message_id, reaction_type, count, first_at)
        SELECT p_app, p_message, x.reaction_type, x.n, x.first_at FROM unnest(v_types, v_counts, v_firsts) AS x(reaction_type, n, first_at)
        ON CONFLICT (app_id, message_id, reaction_type)
        DO UPDATE SET count = excluded.count, first_at = excluded.first_at
        WHERE (t.count, t.first_at) IS DISTINCT FROM (excluded.count, excluded.first_at);
        UPDATE messages m SET reactions = v_stored WHERE m.app_id = p_app AND m.message_id = p_message;
    END IF;
END
$$;
