-- Whether a legal hold covers a message (docs/retention.md#legal-hold): a hold of its conversation (or of every
-- conversation of its type), a hold of its sender, or, for a peer message, a hold of either user of the pair
-- (`p_conv_id` is "a b"). The one test of holds: the purge, delete for everyone, bulk removal and erasure all ask it.
-- In SQL because the purge filters rows with it inside its DELETE.
CREATE OR REPLACE FUNCTION parley_message_held(p_app text, p_conv_type text, p_conv_id text, p_sender text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM legal_holds h
                   WHERE h.app_id = p_app
                     AND ((h.scope_type = p_conv_type AND h.target IN ('', p_conv_id))
                          OR (h.scope_type = 'user' AND h.target = p_sender)
                          OR (h.scope_type = 'user' AND p_conv_type = 'peer'
                              AND h.target = ANY (string_to_array(p_conv_id, ' ')))))
$$;
