-- Whether `p_user` was a member of room `p_room` when event `p_event` was written: the room twin of
-- parley_member_at (API.md §18 "members (joiner included)", "members and leavers"; Migrations/0015). The polling log
-- (`EventLog.read`) asks it per room event written `to_group_members` with `room_id` set and `group_id` null; the live
-- hub answers the same question from its cache (Sources/ParleyLive/MemberAudience.swift) and must agree with it.
--
-- In SQL because the log read filters rows with it inside one statement. Membership intervals are stamped with event
-- ids by the sequencer (`room.created` / `room.member_joined` open one, `room.member_left` / `room.destroyed` close
-- it): a NULL `joined_event` is a join whose event is not sequenced yet (after every visible event), a NULL
-- `left_event` a leave not sequenced yet (still a member at every visible event).
CREATE OR REPLACE FUNCTION parley_room_member_at(p_app text, p_room text, p_user text, p_event bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM room_members m
                   WHERE m.app_id = p_app AND m.room_id = p_room AND m.user_id = p_user
                     AND m.joined_event < p_event)
        OR EXISTS (SELECT 1 FROM room_member_history h
                   WHERE h.app_id = p_app AND h.room_id = p_room AND h.user_id = p_user
                     AND h.joined_event < p_event AND (h.left_event IS NULL OR h.left_event > p_event))
$$;
