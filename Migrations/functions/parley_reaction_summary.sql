-- A message's reaction summary as API.md §2 renders `reactions`, from its per-type counts given as three arrays (one
-- element per type: `p_types`, `p_counts`, `p_firsts` = the type's earliest current reacted_at): `[{reaction_type,
-- count, user_ids}]` ordered by that earliest reaction, then `reaction_type` (bytes); `user_ids` = the type's first 10
-- reactors by time, then id (10 entries a type of the users-list index, so the cost does not grow with the message's
-- reactions). With `p_viewer` given, each item also says whether that user reacted so (`self_included`, only in
-- answers to a user token).
--
-- The counts come as arrays because parley_reaction_changes keeps a batch's counts in hand and writes
-- message_reaction_types once per batch (Migrations/0018); readers pass that table's rows.
-- PL/pgSQL so its plan is cached per session (a SQL function that is not inlined plans on every call).
CREATE OR REPLACE FUNCTION parley_reaction_summary(
    p_app text, p_message text, p_viewer text, p_types text[], p_counts int[], p_firsts bigint[]) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        SELECT coalesce('[' || string_agg(
                   '{"reaction_type":' || to_json(t.reaction_type)::text || ',"count":' || t.n
                   || ',"user_ids":' || array_to_json(f.user_ids)::text
                   || CASE WHEN p_viewer IS NULL THEN ''
                           ELSE ',"self_included":' || (EXISTS (
                               SELECT 1 FROM message_reactions s
                               WHERE s.app_id = p_app AND s.message_id = p_message AND s.reaction_type = t.reaction_type
                                 AND s.user_id = p_viewer))::text END
                   || '}',
                   ',' ORDER BY t.first_at, t.reaction_type COLLATE "C") || ']', '[]')
        FROM unnest(p_types, p_counts, p_firsts) AS t(reaction_type, n, first_at)
        CROSS JOIN LATERAL (
            SELECT array_agg(r.user_id ORDER BY r.reacted_at, r.user_id COLLATE "C") AS user_ids
            FROM (SELECT m.user_id, m.reacted_at FROM message_reactions m
                  WHERE m.app_id = p_app AND m.message_id = p_message AND m.reaction_type = t.reaction_type
                  ORDER BY m.reacted_at, m.user_id COLLATE "C" LIMIT 10) r) f);
END
$$;
