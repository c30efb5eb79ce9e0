import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL for groups and their members (docs/groups.md). No rules here: callers lock, check roles and limits.
enum GroupStore {
    /// The columns ``group(_:from:)`` decodes, in order.
    static let groupColumns = """
        g.group_id, g.name, g.avatar_url, g.notice, g.extended_data, g.owner_id, g.join_mode, g.invite_mode, g.be_invite_mode,
        g.max_members, g.member_count, g.is_big_group, g.mute_mode, g.mute_expires_at, g.mute_roles, g.attributes::text,
        g.created_at, g.updated_at, g.dismissed_at
        """
    static let groupColumnCount = 19
    /// The types of ``groupColumns``, in order.
    private typealias GroupColumns = (
        String, String, String, String, String, String, String, String, String, Int64, Int64, Bool, String, Int64, [Int], String, Int64,
        Int64, Int64?
    )

    static func group(_ row: PostgresRow, from start: Int = 0) throws -> Group {
        let (
            groupID, name, avatarURL, notice, extendedData, ownerID, joinMode, inviteMode, beInviteMode, maxMembers, memberCount, isBigGroup,
            muteMode, muteExpiresAt, muteRoles, attributesText, createdAt, updatedAt, dismissedAt
        ) = try row.decode(GroupColumns.self, at: start)
        let attributes = (try? JSONValue.parse(attributesText))?.objectValue ?? JSONObject()
        return Group(
            groupID: groupID, name: name, avatarURL: avatarURL, notice: notice, extendedData: extendedData, ownerID: ownerID,
            joinMode: Group.JoinMode(rawValue: joinMode) ?? .any, inviteMode: Group.InviteMode(rawValue: inviteMode) ?? .any,
            beInviteMode: Group.BeInviteMode(rawValue: beInviteMode) ?? .none, maxMembers: maxMembers, memberCount: memberCount,
            isBigGroup: isBigGroup,
            mute: Group.Mute(mode: Group.Mute.Mode(rawValue: muteMode) ?? .none, expiresAt: muteExpiresAt, roles: muteRoles.map(Int64.init)),
            attributes: attributes, createdAt: createdAt, updatedAt: updatedAt, dismissedAt: dismissedAt)
    }

    private static func text(_ object: JSONObject) -> String { String(decoding: JSONValue.object(object).serialized(), as: UTF8.self) }

    /// One group; `forUpdate` locks its row (every membership change does, so counts and limits stay exact).
    package static func fetch(appID: String, groupID: String, forUpdate: Bool = false, on db: PostgresConnection) throws -> Group? {
        var query: PostgresQuery = "SELECT \(unsafeSQL: groupColumns) FROM groups g WHERE g.app_id = \(appID) AND g.group_id = \(groupID)"
        if forUpdate { query += " FOR UPDATE" }
        return try db.query(query).first.map { try group($0) }
    }

    /// Stores a new group; false when the id is taken (also by a dismissed group).
    static func insert(appID: String, _ g: Group, on db: PostgresConnection) throws -> Bool {
        let result = try db.query(
            """
            INSERT INTO groups (app_id, group_id, name, avatar_url, notice, extended_data, owner_id, join_mode, invite_mode,
                be_invite_mode, max_members, member_count, is_big_group, attributes, created_at, updated_at)
            VALUES (\(appID), \(g.groupID), \(g.name), \(g.avatarURL), \(g.notice), \(g.extendedData), \(g.ownerID),
                \(g.joinMode.rawValue), \(g.inviteMode.rawValue), \(g.beInviteMode.rawValue), \(g.maxMembers), \(g.memberCount),
                \(g.isBigGroup), \(text(g.attributes))::jsonb, \(g.createdAt), \(g.updatedAt))
            ON CONFLICT (app_id, group_id) DO NOTHING
            """)
        return result.affectedRows == 1
    }

    /// Saves every mutable field of a locked group.
    static func save(appID: String, _ g: Group, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE groups SET name = \(g.name), avatar_url = \(g.avatarURL), notice = \(g.notice), extended_data = \(g.extendedData),
                owner_id = \(g.ownerID), join_mode = \(g.joinMode.rawValue), invite_mode = \(g.inviteMode.rawValue),
                be_invite_mode = \(g.beInviteMode.rawValue), max_members = \(g.maxMembers), member_count = \(g.memberCount),
                is_big_group = \(g.isBigGroup), mute_mode = \(g.mute.mode.rawValue), mute_expires_at = \(g.mute.expiresAt),
                mute_roles = \(g.mute.roles)::int[], attributes = \(text(g.attributes))::jsonb, updated_at = \(g.updatedAt),
                dismissed_at = \(g.dismissedAt)
            WHERE app_id = \(appID) AND group_id = \(g.groupID)
            """)
    }

    /// Up to `limit` groups by `created_at` desc, then `group_id` desc, strictly after `after`, whose name matches
    /// every keyword (already lowercased).
    static func list(
        appID: String, keywords: [String], includeDismissed: Bool, after: (createdAt: Int64, groupID: String)?, limit: Int,
        on db: PostgresConnection
    ) throws -> [Group] {
        try KeywordMatch.query(keywords: keywords, on: db) { match in
            var query: PostgresQuery = "SELECT \(unsafeSQL: groupColumns) FROM groups g WHERE g.app_id = \(appID)"
            if !includeDismissed { query += " AND g.dismissed_at IS NULL" }
            if let after { query += " AND (g.created_at, g.group_id) < (\(after.createdAt), \(after.groupID))" }
            query += match(["g.name"])
            query += " ORDER BY g.created_at DESC, g.group_id DESC LIMIT \(limit)"
            return try db.query(query).rows.map { try group($0) }
        }
    }

    // MARK: - Members

    /// The columns ``member(_:from:)`` decodes (`group_members m` joined with `users u`).
    static let memberColumns =
        "m.user_id, u.name, u.avatar_url, m.role, m.nickname, m.muted_until, m.enter_type, m.joined_at, m.operated_by"
    static let memberJoin = "group_members m JOIN users u ON u.app_id = m.app_id AND u.user_id = m.user_id"

    /// The types of ``memberColumns``, in order.
    private typealias MemberColumns = (String, String, String, Int64, String, Int64, String, Int64, String?)

    static func member(_ row: PostgresRow, from start: Int = 0) throws -> GroupMember {
        let (userID, name, avatarURL, role, nickname, mutedUntil, enterType, joinedAt, operatedBy) = try row.decode(MemberColumns.self, at: start)
        return GroupMember(
            userID: userID, name: name, avatarURL: avatarURL, role: role, nickname: nickname, mutedUntil: mutedUntil,
            enterType: GroupMember.EnterType(rawValue: enterType) ?? .joined, joinedAt: joinedAt, operatedBy: operatedBy)
    }

    /// The members among `userIDs`, by user id.
    static func members(appID: String, groupID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: GroupMember] {
        if userIDs.isEmpty { return [:] }
        let rows = try db.query(
            """
            SELECT \(unsafeSQL: memberColumns) FROM \(unsafeSQL: memberJoin)
            WHERE m.app_id = \(appID) AND m.group_id = \(groupID) AND m.user_id = ANY(\(userIDs)::text[])
            """
        ).rows
        var out: [String: GroupMember] = [:]
        for row in rows {
            let m = try member(row)
            out[m.userID] = m
        }
        return out
    }

    static func member(appID: String, groupID: String, userID: String, on db: PostgresConnection) throws -> GroupMember? {
        try members(appID: appID, groupID: groupID, userIDs: [userID], on: db)[userID]
    }

    /// Every member's id (event audiences); `roles` restricts to those roles (owner and admins: `[1, 2]`).
    static func memberIDs(appID: String, groupID: String, roles: [Int64]? = nil, on db: PostgresConnection) throws -> [String] {
        var query: PostgresQuery = "SELECT user_id FROM group_members WHERE app_id = \(appID) AND group_id = \(groupID)"
        if let roles { query += " AND role = ANY(\(roles)::int[])" }
        query += " ORDER BY user_id"
        return try db.query(query).decode(String.self)
    }

    /// A new membership row (the user's profile is joined in on reads).
    struct NewMember: Sendable {
        var userID: String
        var role: Int64
        var enterType: GroupMember.EnterType
        var operatedBy: String?
    }

    /// Adds `members` joined at `now` and returns them as read back (user profile included), in input order.
    static func insertMembers(appID: String, groupID: String, _ members: [NewMember], now: Int64, on db: PostgresConnection) throws
        -> [GroupMember]
    {
        if members.isEmpty { return [] }
        let userIDs = members.map(\.userID)
        let roles = members.map(\.role)
        let enterTypes = members.map(\.enterType.rawValue)
        let operators = members.map { $0.operatedBy ?? "" }
        let rows = try db.query(
            """
            WITH ins AS (
                INSERT INTO group_members (app_id, group_id, user_id, role, enter_type, joined_at, operated_by)
                SELECT \(appID), \(groupID), x.user_id, x.role, x.enter_type, \(now), NULLIF(x.operated_by, '')
                FROM unnest(\(userIDs)::text[], \(roles)::int[], \(enterTypes)::text[], \(operators)::text[])
                    WITH ORDINALITY AS x(user_id, role, enter_type, operated_by, ord)
                RETURNING user_id, role, nickname, muted_until, enter_type, joined_at, operated_by
            )
            SELECT ins.user_id, u.name, u.avatar_url, ins.role, ins.nickname, ins.muted_until, ins.enter_type, ins.joined_at,
                   ins.operated_by
            FROM ins JOIN users u ON u.app_id = \(appID) AND u.user_id = ins.user_id
            """
        ).rows
        var byID: [String: GroupMember] = [:]
        for row in rows {
            let m = try member(row)
            byID[m.userID] = m
        }
        return members.compactMap { byID[$0.userID] }
    }

    /// Removes `userIDs` from the group; returns the ids that were members.
    static func deleteMembers(appID: String, groupID: String, userIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if userIDs.isEmpty { return [] }
        // The membership moves to group_member_history; the sequencer stamps its end with the group.member_left event
        // of this transaction, and its start too when the join's event is not sequenced yet (Migrations/0011).
        let deleted = try db.query(
            """
            WITH d AS (
                DELETE FROM group_members WHERE app_id = \(appID) AND group_id = \(groupID) AND user_id = ANY(\(userIDs)::text[])
                RETURNING user_id, joined_event, joined_xact
            )
            INSERT INTO group_member_history (app_id, group_id, user_id, joined_event, joined_xact)
            SELECT \(appID), \(groupID), d.user_id, d.joined_event, d.joined_xact FROM d
            ON CONFLICT (app_id, group_id, user_id, joined_event) DO NOTHING
            RETURNING user_id
            """
        ).decode(String.self)
        return Set(deleted)
    }

    /// Saves a member's role, nickname and mute.
    static func saveMember(appID: String, groupID: String, _ m: GroupMember, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE group_members SET role = \(m.role), nickname = \(m.nickname), muted_until = \(m.mutedUntil)
            WHERE app_id = \(appID) AND group_id = \(groupID) AND user_id = \(m.userID)
            """)
    }

    /// Owner continuity (docs/groups.md#lifecycle-and-membership): the admin with the earliest `joined_at`, else the
    /// member with the earliest `joined_at`, ties by smallest `user_id`; nil when nobody is left.
    static func successor(appID: String, groupID: String, on db: PostgresConnection) throws -> String? {
        try db.query(
            """
            SELECT user_id FROM group_members WHERE app_id = \(appID) AND group_id = \(groupID) AND role <> 1
            ORDER BY (role <> 2), joined_at, user_id LIMIT 1
            """
        ).decodeFirst(String.self)
    }

    /// The member list (docs/groups.md#lifecycle-and-membership): by role asc, `joined_at` asc, `user_id` asc, strictly
    /// after `after`, optionally only `roles`, each matching every keyword on user_id, name or nickname.
    static func listMembers(
        appID: String, groupID: String, roles: [Int64]?, keywords: [String], after: (role: Int64, joinedAt: Int64, userID: String)?,
        limit: Int, on db: PostgresConnection
    ) throws -> [GroupMember] {
        try KeywordMatch.query(keywords: keywords, on: db) { match in
            var query: PostgresQuery =
                "SELECT \(unsafeSQL: memberColumns) FROM \(unsafeSQL: memberJoin) WHERE m.app_id = \(appID) AND m.group_id = \(groupID)"
            if let roles { query += " AND m.role = ANY(\(roles)::int[])" }
            if let after {
                query += " AND (m.role, m.joined_at, m.user_id) > (\(after.role), \(after.joinedAt), \(after.userID))"
            }
            query += match(["m.user_id", "u.name", "m.nickname"])
            query += " ORDER BY m.role, m.joined_at, m.user_id LIMIT \(limit)"
            return try db.query(query).rows.map { try member($0) }
        }
    }

    /// Members with a mute unexpired at `now`, by `user_id` asc, strictly after `after`.
    static func mutedMembers(appID: String, groupID: String, now: Int64, after: String?, limit: Int, on db: PostgresConnection) throws
        -> [GroupMember]
    {
        try db.query(
            """
            SELECT \(unsafeSQL: memberColumns) FROM \(unsafeSQL: memberJoin)
            WHERE m.app_id = \(appID) AND m.group_id = \(groupID) AND (m.muted_until = -1 OR m.muted_until > \(now))
                AND m.user_id > \(after ?? "")
            ORDER BY m.user_id LIMIT \(limit)
            """
        ).rows.map { try member($0) }
    }

    /// One entry of a user's group list (docs/groups.md#lifecycle-and-membership).
    struct Membership: Sendable {
        var group: Group
        var role: Int64
        var joinedAt: Int64
        var notificationStatus: String
        var alias: String
    }

    /// The live groups `userID` is a member of, by `joined_at` desc, then `group_id` desc, strictly after `after`,
    /// whose name matches every keyword. The notification status comes from the user's group conversation entry.
    static func userGroups(
        appID: String, userID: String, keywords: [String], after: (joinedAt: Int64, groupID: String)?, limit: Int,
        on db: PostgresConnection
    ) throws -> [Membership] {
        try KeywordMatch.query(keywords: keywords, on: db) { match in
            var query: PostgresQuery = """
                SELECT \(unsafeSQL: groupColumns), m.role, m.joined_at, coalesce(c.notification_status, 'notify'), m.alias
                FROM group_members m
                JOIN groups g ON g.app_id = m.app_id AND g.group_id = m.group_id
                LEFT JOIN conversations c ON c.app_id = m.app_id AND c.user_id = m.user_id AND c.conv_type = 'group'
                    AND c.conv_id = m.group_id
                WHERE m.app_id = \(appID) AND m.user_id = \(userID) AND g.dismissed_at IS NULL
                """
            if let after { query += " AND (m.joined_at, m.group_id) < (\(after.joinedAt), \(after.groupID))" }
            query += match(["g.name"])
            query += " ORDER BY m.joined_at DESC, m.group_id DESC LIMIT \(limit)"
            return try db.query(query).rows.map { row in
                let (role, joinedAt, notificationStatus, alias) = try row.decode((Int64, Int64, String, String).self, at: groupColumnCount)
                return Membership(group: try group(row), role: role, joinedAt: joinedAt, notificationStatus: notificationStatus, alias: alias)
            }
        }
    }

    /// The live groups of `userID` (a hard delete removes it from each), locked in a stable order.
    static func groupIDs(appID: String, userID: String, on db: PostgresConnection) throws -> [String] {
        try db.query(
            """
            SELECT g.group_id FROM group_members m JOIN groups g ON g.app_id = m.app_id AND g.group_id = m.group_id
            WHERE m.app_id = \(appID) AND m.user_id = \(userID) AND g.dismissed_at IS NULL ORDER BY g.group_id
            """
        ).decode(String.self)
    }
}
