-- Whether an endpoint's `event_types` select an after-event type: `*`, `<prefix>.*` or the exact type.
CREATE OR REPLACE FUNCTION parley_webhook_selects(p_patterns text[], p_type text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT '*' = ANY(p_patterns) OR p_type = ANY(p_patterns) OR (split_part(p_type, '.', 1) || '.*') = ANY(p_patterns)
$$;
