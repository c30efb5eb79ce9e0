import ParleyPostgres

/// SQL for groups and their members (API.md §9). No rules here: callers lock, check roles and limits.
enum GroupStore {
    /// The columns ``group(_:from:)`` decodes, in order.
    static let groupColumns = """
        g.group_id, g.name, g.avatar_url, g.notice, g.extended_data, g.owner_id, g.join_mode, g.invite_mode, g.be_invite_mode,
        g.max_members, g.member_count, g.is_big_group, g.mute_mode, g.mute_expires_at, g.mute_roles, g.attributes::text,
        g.created_at, g.updated_at, g.dismissed_at
        """
    static let groupColumnCount = 19

    static func group(_ row: PostgresRow, from s: Int = 0) throws -> Group {
        let attributes = (try? JSONValue.parse(try row[s + 15].string))?.objectValue ?? JSONObject()
        return Group(
            groupID: try row[s].string, name: try row[s + 1].string, avatarURL: try row[s + 2].string, notice: try row[s + 3].string,
            extendedData: try row[s + 4].string, ownerID: try row[s + 5].string,
            joinMode: Group.JoinMode(rawValue: try row[s + 6].string) ?? .any,
            inviteMode: Group.InviteMode(rawValue: try row[s + 7].string) ?? .any,
            beInviteMode: Group.BeInviteMode(rawValue: try row[s + 8].string) ?? .none,
            maxMembers: try row[s + 9].int64, memberCount: try row[s + 10].int64, isBigGroup: try row[s + 11].bool,
            mute: Group.Mute(
                mode: Group.Mute.Mode(rawValue: try row[s + 12].string) ?? .none, expiresAt: try row[s + 13].int64,
                roles: try row[s + 14].intArray.map(Int64.init)),
            attributes: attributes, createdAt: try row[s + 16].int64, updatedAt: try row[s + 17].int64,
            dismissedAt: row[s + 18].isNull ? nil : try row[s + 18].int64)
    }

    private static func text(_ object: JSONObject) -> String { String(decoding: JSONValue.object(object).serialized(), as: UTF8.self) }

    /// One group; `forUpdate` locks its row (every membership change does, so counts and limits stay exact).
    static func fetch(appID: String, groupID: String, forUpdate: Bool = false, on db: PostgresConnection) throws -> Group? {
        try db.query(
            sql:
                "SELECT \(groupColumns) FROM groups g WHERE g.app_id = $1 AND g.group_id = $2" + (forUpdate ? " FOR UPDATE" : ""),
            [appID, groupID], prepared: true
        ).first.map { try group($0) }
    }

    /// Stores a new group; false when the id is taken (also by a dismissed group).
    static func insert(appID: String, _ g: Group, on db: PostgresConnection) throws -> Bool {
        let result = try db.query(
            sql:
                """
                INSERT INTO groups (app_id, group_id, name, avatar_url, notice, extended_data, owner_id, join_mode, invite_mode,
                    be_invite_mode, max_members, member_count, is_big_group, attributes, created_at, updated_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14::jsonb, $15, $16)
                ON CONFLICT (app_id, group_id) DO NOTHING
                """,
            [
                appID, g.groupID, g.name, g.avatarURL, g.notice, g.extendedData, g.ownerID, g.joinMode.rawValue, g.inviteMode.rawValue,
                g.beInviteMode.rawValue, g.maxMembers, g.memberCount, g.isBigGroup, text(g.attributes), g.createdAt, g.updatedAt,
            ], prepared: true)
        return result.affectedRows == 1
    }

    /// Saves every mutable field of a locked group.
    static func save(appID: String, _ g: Group, on db: PostgresConnection) throws {
        _ = try db.query(
            sql:
                """
                UPDATE groups SET name = $3, avatar_url = $4, notice = $5, extended_data = $6, owner_id = $7, join_mode = $8,
                    invite_mode = $9, be_invite_mode = $10, max_members = $11, member_count = $12, is_big_group = $13,
                    mute_mode = $14, mute_expires_at = $15, mute_roles = $16::int[], attributes = $17::jsonb, updated_at = $18,
                    dismissed_at = $19
                WHERE app_id = $1 AND group_id = $2
                """,
            [
                appID, g.groupID, g.name, g.avatarURL, g.notice, g.extendedData, g.ownerID, g.joinMode.rawValue, g.inviteMode.rawValue,
                g.beInviteMode.rawValue, g.maxMembers, g.memberCount, g.isBigGroup, g.mute.mode.rawValue, g.mute.expiresAt,
                g.mute.roles, text(g.attributes), g.updatedAt, g.dismissedAt,
            ], prepared: true)
    }

    /// Up to `limit` groups by `created_at` desc, then `group_id` desc, strictly after `after`, whose name matches
    /// every keyword (already lowercased).
    static func list(
        appID: String, keywords: [String], includeDismissed: Bool, after: (createdAt: Int64, groupID: String)?, limit: Int,
        on db: PostgresConnection
    ) throws -> [Group] {
        try KeywordMatch.query(keywords: keywords, on: db) { match in
            var parameters: [(any PostgresEncodable)?] = [appID, limit]
            var sql = "SELECT \(groupColumns) FROM groups g WHERE g.app_id = $1"
            if !includeDismissed { sql += " AND g.dismissed_at IS NULL" }
            if let after {
                parameters += [after.createdAt, after.groupID]
                sql += " AND (g.created_at, g.group_id) < ($3, $4)"
            }
            if !keywords.isEmpty {
                parameters.append(keywords)
                sql += match(["g.name"], parameters.count)
            }
            sql += " ORDER BY g.created_at DESC, g.group_id DESC LIMIT $2"
            return try db.query(sql: sql, parameters, prepared: true).rows.map { try group($0) }
        }
    }

    // MARK: - Members

    /// The columns ``member(_:from:)`` decodes (`group_members m` joined with `users u`).
    static let memberColumns =
        "m.user_id, u.name, u.avatar_url, m.role, m.nickname, m.muted_until, m.enter_type, m.joined_at, m.operated_by"
    static let memberJoin = "group_members m JOIN users u ON u.app_id = m.app_id AND u.user_id = m.user_id"

    static func member(_ row: PostgresRow, from s: Int = 0) throws -> GroupMember {
        GroupMember(
            userID: try row[s].string, name: try row[s + 1].string, avatarURL: try row[s + 2].string, role: try row[s + 3].int64,
            nickname: try row[s + 4].string, mutedUntil: try row[s + 5].int64,
            enterType: GroupMember.EnterType(rawValue: try row[s + 6].string) ?? .joined, joinedAt: try row[s + 7].int64,
            operatedBy: row[s + 8].isNull ? nil : try row[s + 8].string)
    }

    /// The members among `userIDs`, by user id.
    static func members(appID: String, groupID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: GroupMember] {
        if userIDs.isEmpty { return [:] }
        let rows = try db.query(
            sql:
                "SELECT \(memberColumns) FROM \(memberJoin) WHERE m.app_id = $1 AND m.group_id = $2 AND m.user_id = ANY($3::text[])",
            [appID, groupID, userIDs], prepared: true
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
        let result =
            if let roles {
                try db.query(
                    sql:
                        "SELECT user_id FROM group_members WHERE app_id = $1 AND group_id = $2 AND role = ANY($3::int[]) ORDER BY user_id",
                    [appID, groupID, roles], prepared: true)
            } else {
                try db.query(
                    sql:
                        "SELECT user_id FROM group_members WHERE app_id = $1 AND group_id = $2 ORDER BY user_id", [appID, groupID],
                    prepared: true)
            }
        return try result.rows.map { try $0[0].string }
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
        let rows = try db.query(
            sql:
                """
                WITH ins AS (
                    INSERT INTO group_members (app_id, group_id, user_id, role, enter_type, joined_at, operated_by)
                    SELECT $1, $2, x.user_id, x.role, x.enter_type, $7, NULLIF(x.operated_by, '')
                    FROM unnest($3::text[], $4::int[], $5::text[], $6::text[]) WITH ORDINALITY AS x(user_id, role, enter_type, operated_by, ord)
                    RETURNING user_id, role, nickname, muted_until, enter_type, joined_at, operated_by
                )
                SELECT ins.user_id, u.name, u.avatar_url, ins.role, ins.nickname, ins.muted_until, ins.enter_type, ins.joined_at,
                       ins.operated_by
                FROM ins JOIN users u ON u.app_id = $1 AND u.user_id = ins.user_id
                """,
            [
                appID, groupID, members.map(\.userID), members.map(\.role), members.map(\.enterType.rawValue),
                members.map { $0.operatedBy ?? "" }, now,
            ], prepared: true
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
        let result = try db.query(
            sql:
                """
                WITH d AS (
                    DELETE FROM group_members WHERE app_id = $1 AND group_id = $2 AND user_id = ANY($3::text[])
                    RETURNING user_id, joined_event, joined_xact
                )
                INSERT INTO group_member_history (app_id, group_id, user_id, joined_event, joined_xact)
                SELECT $1, $2, d.user_id, d.joined_event, d.joined_xact FROM d
                ON CONFLICT (app_id, group_id, user_id, joined_event) DO NOTHING
                RETURNING user_id
                """,
            [appID, groupID, userIDs], prepared: true)
        return Set(try result.rows.map { try $0[0].string })
    }

    /// Saves a member's role, nickname and mute.
    static func saveMember(appID: String, groupID: String, _ m: GroupMember, on db: PostgresConnection) throws {
        _ = try db.query(
            sql:
                "UPDATE group_members SET role = $4, nickname = $5, muted_until = $6 WHERE app_id = $1 AND group_id = $2 AND user_id = $3",
            [appID, groupID, m.userID, m.role, m.nickname, m.mutedUntil], prepared: true)
    }

    /// Owner continuity (§9.3): the admin with the earliest `joined_at`, else the member with the earliest
    /// `joined_at`, ties by smallest `user_id`; nil when nobody is left.
    static func successor(appID: String, groupID: String, on db: PostgresConnection) throws -> String? {
        try db.query(
            sql:
                """
                SELECT user_id FROM group_members WHERE app_id = $1 AND group_id = $2 AND role <> 1
                ORDER BY (role <> 2), joined_at, user_id LIMIT 1
                """,
            [appID, groupID], prepared: true
        ).first.map { try $0[0].string }
    }

    /// The member list (§9.3): by role asc, `joined_at` asc, `user_id` asc, strictly after `after`, optionally
    /// only `roles`, each matching every keyword on user_id, name or nickname.
    static func listMembers(
        appID: String, groupID: String, roles: [Int64]?, keywords: [String], after: (role: Int64, joinedAt: Int64, userID: String)?,
        limit: Int, on db: PostgresConnection
    ) throws -> [GroupMember] {
        try KeywordMatch.query(keywords: keywords, on: db) { match in
            var parameters: [(any PostgresEncodable)?] = [appID, groupID, limit]
            var sql = "SELECT \(memberColumns) FROM \(memberJoin) WHERE m.app_id = $1 AND m.group_id = $2"
            if let roles {
                parameters.append(roles)
                sql += " AND m.role = ANY($\(parameters.count)::int[])"
            }
            if let after {
                parameters += [after.role, after.joinedAt, after.userID]
                let n = parameters.count
                sql += " AND (m.role, m.joined_at, m.user_id) > ($\(n - 2), $\(n - 1), $\(n))"
            }
            if !keywords.isEmpty {
                parameters.append(keywords)
                sql += match(["m.user_id", "u.name", "m.nickname"], parameters.count)
            }
            sql += " ORDER BY m.role, m.joined_at, m.user_id LIMIT $3"
            return try db.query(sql: sql, parameters, prepared: true).rows.map { try member($0) }
        }
    }

    /// Members with a mute unexpired at `now`, by `user_id` asc, strictly after `after`.
    static func mutedMembers(appID: String, groupID: String, now: Int64, after: String?, limit: Int, on db: PostgresConnection) throws
        -> [GroupMember]
    {
        try db.query(
            sql:
                """
                SELECT \(memberColumns) FROM \(memberJoin)
                WHERE m.app_id = $1 AND m.group_id = $2 AND (m.muted_until = -1 OR m.muted_until > $3) AND m.user_id > $4
                ORDER BY m.user_id LIMIT $5
                """,
            [appID, groupID, now, after ?? "", limit], prepared: true
        ).rows.map { try member($0) }
    }

    /// One entry of a user's group list (§9.3).
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
            var parameters: [(any PostgresEncodable)?] = [appID, userID, limit]
            var sql = """
                SELECT \(groupColumns), m.role, m.joined_at, coalesce(c.notification_status, 'notify'), m.alias
                FROM group_members m
                JOIN groups g ON g.app_id = m.app_id AND g.group_id = m.group_id
                LEFT JOIN conversations c ON c.app_id = m.app_id AND c.user_id = m.user_id AND c.conv_type = 'group'
                    AND c.conv_id = m.group_id
                WHERE m.app_id = $1 AND m.user_id = $2 AND g.dismissed_at IS NULL
                """
            if let after {
                parameters += [after.joinedAt, after.groupID]
                sql += " AND (m.joined_at, m.group_id) < ($4, $5)"
            }
            if !keywords.isEmpty {
                parameters.append(keywords)
                sql += match(["g.name"], parameters.count)
            }
            sql += " ORDER BY m.joined_at DESC, m.group_id DESC LIMIT $3"
            let n = groupColumnCount
            return try db.query(sql: sql, parameters, prepared: true).rows.map { row in
                Membership(
                    group: try group(row), role: try row[n].int64, joinedAt: try row[n + 1].int64,
                    notificationStatus: try row[n + 2].string, alias: try row[n + 3].string)
            }
        }
    }

    /// The live groups of `userID` (a hard delete removes it from each), locked in a stable order.
    static func groupIDs(appID: String, userID: String, on db: PostgresConnection) throws -> [String] {
        try db.query(
            sql:
                """
                SELECT g.group_id FROM group_members m JOIN groups g ON g.app_id = m.app_id AND g.group_id = m.group_id
                WHERE m.app_id = $1 AND m.user_id = $2 AND g.dismissed_at IS NULL ORDER BY g.group_id
                """,
            [appID, userID], prepared: true
        ).rows.map { try $0[0].string }
    }
}
