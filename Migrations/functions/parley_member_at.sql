-- Whether `p_user` was a member of `p_group` when event `p_event` was written (API.md §11.1 "every member at commit
-- time"; Migrations/0009, 0011). The polling log (`EventLog.read`) asks it per group message event; the live hub
-- answers the same question from its cache (Sources/ParleyLive/MemberAudience.swift) and must agree with it. Rooms
-- have their twin, parley_room_member_at.
--
-- In SQL because the log read filters rows with it inside one statement. Membership intervals are stamped with event
-- ids by the sequencer: a NULL `joined_event` is a join whose event is not sequenced yet (after every visible event),
-- a NULL `left_event` a leave not sequenced yet (still a member at every visible event).
CREATE OR REPLACE FUNCTION parley_member_at(p_app text, p_group text, p_user text, p_event bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM group_members m
                   WHERE m.app_id = p_app AND m.group_id = p_group AND m.user_id = p_user
                     AND m.joined_event < p_event)
        OR EXISTS (SELECT 1 FROM group_member_history h
                   WHERE h.app_id = p_app AND h.group_id = p_group AND h.user_id = p_user
                     AND h.joined_event < p_event AND (h.left_event IS NULL OR h.left_event > p_event))
$$;
