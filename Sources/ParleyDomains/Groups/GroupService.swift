import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The group rules (docs/groups.md). Every change runs in one transaction that locks the group row first (so member
/// counts, `max_members` and owner continuity are exact under concurrency), checks the role matrix (``GroupRole``),
/// changes the rows and writes its events last (docs/events.md#the-event-object).
///
/// A value made per request; it owns nothing mutable. Transaction bodies are re-runnable (the pool retries them on
/// serialization failures), so they compute everything they return from what they read.
package struct GroupService: DomainService {
    /// The request's connection (its worker thread's): reads run on it and transactions open on it.
    let db: PostgresConnection
    let appID: String
    /// Server-clock ms of the request.
    let now: Int64
    /// The app's group settings (defaults unless made by ``forRequest(_:)``).
    var limits = GroupLimits()

    package init(db: PostgresConnection, appID: String, now: Int64) {
        self.db = db
        self.appID = appID
        self.now = now
    }

    /// The service for a request, with its app's group settings (the one way routes make it, as for every domain;
    /// background work, which has no request, uses ``init(db:appID:now:)`` and the defaults it needs).
    package init(_ ctx: APIContext) {
        self.init(db: ctx.db, appID: ctx.appID, now: ctx.now)
        limits = GroupLimits(ctx.app.settings)
    }

    /// Most initial members of a create and items of an invite, kick or mute.
    static let maxInitialMembers = 500
    static let maxBatch = 100

    /// Who does a group action (docs/users.md#user-tokens): a user — with the role checks (``GroupRole``) unless the
    /// app said `skip_checks` — or the app itself (an app key without `operator`: no role or membership check, events
    /// carry null).
    struct Actor: Sendable {
        var userID: String?
        var checks: Bool

        static let app = Actor(userID: nil, checks: false)
    }

    // MARK: - Lifecycle (docs/groups.md#lifecycle-and-membership)

    /// The fields of a create.
    package struct NewGroup: Sendable {
        var groupID: String?
        var name = ""
        var avatarURL = ""
        var notice = ""
        var extendedData = ""
        var attributes: [(key: String, value: String)] = []
        var joinMode = Group.JoinMode.any
        var inviteMode = Group.InviteMode.any
        var beInviteMode = Group.BeInviteMode.none
        var maxMembers: Int64 = 0
        var bigGroup = false
        var owner: String
        /// Distinct valid ids (invalid or repeated items were failed by the route).
        var memberIDs: [String] = []
    }

    /// The outcome of one initial member or invitee.
    package enum MemberOutcome: Sendable {
        case joined(GroupMember)
        case pending(GroupApplication)
        case failed(ErrorCode, String)
    }

    /// Creates a group owned by `input.owner` with the initial members joined directly (`invited`, whatever
    /// `be_invite_mode`). Request-level failures: 404 owner, 409 id taken, 422 attributes, 422 `max_members`.
    package func create(_ input: NewGroup) throws -> (group: Group, outcomes: [String: MemberOutcome]) {
        if input.maxMembers > limits.maxGroupMembers {
            throw APIError(.groupFull, "max_members \(input.maxMembers) is above the app maximum \(limits.maxGroupMembers)")
        }
        if input.maxMembers != 0 && input.maxMembers < 1 + Int64(input.memberIDs.count) {
            throw APIError(.groupFull, "max_members \(input.maxMembers) is below 1 + \(input.memberIDs.count) members")
        }
        var attributes = JSONObject()
        for (key, value) in input.attributes {
            if let code = GroupAttributes.problem(key: key, value: value, in: attributes) {
                throw APIError(code, "attribute \(key): \(code.name)")
            }
            attributes[key] = .string(value)
        }
        return try db.transaction { db in
            try UserService.requireActive(input.owner, appID: appID, on: db)
            var group = Group(
                groupID: input.groupID ?? IdentifierKind.generateGroupID(), name: input.name, avatarURL: input.avatarURL,
                notice: input.notice, extendedData: input.extendedData, ownerID: input.owner, joinMode: input.joinMode,
                inviteMode: input.inviteMode, beInviteMode: input.beInviteMode, maxMembers: input.maxMembers, memberCount: 1,
                isBigGroup: input.bigGroup, mute: .none, attributes: attributes, createdAt: now, updatedAt: now, dismissedAt: nil)
            guard try GroupStore.insert(appID: appID, group, on: db) else {
                throw APIError(.groupAlreadyExists, "group \(group.groupID) already exists")
            }
            let live = try liveUsers(input.memberIDs, on: db)
            let capacity = group.effectiveMaxMembers(limits)
            var outcomes: [String: MemberOutcome] = [:]
            var rows = [GroupStore.NewMember(userID: input.owner, role: GroupRole.owner, enterType: .created, operatedBy: nil)]
            for id in input.memberIDs {
                if id == input.owner {
                    outcomes[id] = .failed(.alreadyGroupMember, "user \(id) is the owner")
                } else if !live.contains(id) {
                    outcomes[id] = .failed(.userNotFound, "user \(id) does not exist")
                } else if Int64(rows.count) >= capacity {
                    outcomes[id] = .failed(.groupFull, "group \(group.groupID) is full (max_members \(capacity))")
                } else {
                    rows.append(GroupStore.NewMember(userID: id, role: GroupRole.member, enterType: .invited, operatedBy: input.owner))
                }
            }
            let members = try GroupStore.insertMembers(appID: appID, groupID: group.groupID, rows, now: now, on: db)
            for m in members where m.userID != input.owner { outcomes[m.userID] = .joined(m) }
            group.memberCount = Int64(members.count)
            group.isBigGroup = group.isBigGroup || group.memberCount > limits.bigGroupThreshold
            try GroupStore.save(appID: appID, group, on: db)
            let ids = members.map(\.userID)
            // The first message of every group (seq 1), whatever its size; then everyone's entry starts after it.
            let tips = try writeTips(
                group, GroupTips(event: .created, operatorID: input.owner, targets: ids.filter { $0 != input.owner }), on: db)
            try GroupConversations.follow(appID: appID, groupID: group.groupID, userIDs: ids, now: now, on: db)
            var data = JSONObjectWriter()
            data.raw("group", group.json(limits, now: now))
            data["member_ids"] = ids
            data["operator"] = input.owner
            try EventLog.append(
                [
                    NewEvent(type: "group.created", data: data.finish(), audience: ids, groupID: group.groupID, orderKey: "group:" + group.groupID),
                    tips,
                ],
                appID: appID, now: now, on: db)
            return (group, outcomes)
        }
    }

    /// One group, dismissed or not (404 `group_not_found`).
    func get(_ groupID: String, on db: PostgresConnection) throws -> Group {
        guard let group = try GroupStore.fetch(appID: appID, groupID: groupID, on: db) else { throw APIError.groupNotFound(groupID) }
        return group
    }

    /// The settable fields of a PATCH; nil leaves a field unchanged.
    struct Patch: Sendable {
        var name: String?
        var avatarURL: String?
        var notice: String?
        var extendedData: String?
        var joinMode: Group.JoinMode?
        var inviteMode: Group.InviteMode?
        var beInviteMode: Group.BeInviteMode?
        var maxMembers: Int64?
    }

    /// Updates the group's info (owner and admins); writes `group.updated` when something changed.
    func update(_ groupID: String, actor: Actor, patch: Patch) throws -> Group {
        try db.transaction { db in
            var group = try lockActive(groupID, on: db)
            let op = try operatorMember(actor, group, on: db)
            try permit(op.map { GroupRole.canEditGroup($0.role) }, "only the owner and admins may update the group")
            var changed: [String] = []
            func set<T: Equatable>(_ field: String, _ keyPath: WritableKeyPath<Group, T>, _ value: T?) {
                guard let value, group[keyPath: keyPath] != value else { return }
                group[keyPath: keyPath] = value
                changed.append(field)
            }
            set("name", \.name, patch.name)
            set("avatar_url", \.avatarURL, patch.avatarURL)
            set("notice", \.notice, patch.notice)
            set("extended_data", \.extendedData, patch.extendedData)
            set("join_mode", \.joinMode, patch.joinMode)
            set("invite_mode", \.inviteMode, patch.inviteMode)
            set("be_invite_mode", \.beInviteMode, patch.beInviteMode)
            if let maxMembers = patch.maxMembers {
                if maxMembers > limits.maxGroupMembers {
                    throw APIError(.groupFull, "max_members \(maxMembers) is above the app maximum \(limits.maxGroupMembers)")
                }
                if maxMembers != 0 && maxMembers < group.memberCount {
                    throw APIError(.groupFull, "max_members \(maxMembers) is below the member count \(group.memberCount)")
                }
                set("max_members", \.maxMembers, maxMembers)
            }
            guard !changed.isEmpty else { return group }
            group.updatedAt = now
            try GroupStore.save(appID: appID, group, on: db)
            var events: [NewEvent] = []
            var data = JSONObjectWriter()
            data.raw("group", group.json(limits, now: now))
            data["changed"] = changed
            data["operator"] = actor.userID
            let audience = try GroupStore.memberIDs(appID: appID, groupID: groupID, on: db)
            events.append(event("group.updated", group, data, audience))
            // Only name, notice and avatar changes get a tips message (docs/groups.md#tips-messages), carrying the new
            // values.
            func new(_ field: String, _ value: String) -> String? { changed.contains(field) ? value : nil }
            let groupData = GroupTips.Change.groupData(
                name: new("name", group.name), notice: new("notice", group.notice), avatarURL: new("avatar_url", group.avatarURL))
            if groupData != .groupData(name: nil, notice: nil, avatarURL: nil) {
                events.append(try writeTips(group, GroupTips(event: .groupChanged, operatorID: actor.userID, change: groupData), on: db))
            }
            try EventLog.append(events, appID: appID, now: now, on: db)
            return group
        }
    }

    /// Dismisses the group (owner only): `dismissed_at` is set and the member rows stay as the members at
    /// dismissal.
    func dismiss(_ groupID: String, actor: Actor) throws -> Group {
        try db.transaction { db in
            var group = try lockActive(groupID, on: db)
            let op = try operatorMember(actor, group, on: db)
            try permit(op.map { GroupRole.isOwner($0.role) }, "only the owner may dismiss the group")
            let audience = try GroupStore.memberIDs(appID: appID, groupID: groupID, on: db)
            let events = try markDismissed(&group, operator: actor.userID, audience: audience, on: db)
            try EventLog.append(events, appID: appID, now: now, on: db)
            return group
        }
    }

    // MARK: - Reads

    /// Who reads a group's members or attributes: the app, or a member (403 `not_group_member`); returns the
    /// reading member.
    func reader(_ group: Group, userID: String?, on db: PostgresConnection) throws -> GroupMember? {
        guard let userID else { return nil }
        guard let member = try GroupStore.member(appID: appID, groupID: group.groupID, userID: userID, on: db) else {
            throw APIError.notGroupMember(userID, group.groupID)
        }
        return member
    }

    /// The member list check (docs/groups.md#roles, docs/groups.md#big-groups): ordinary members of a big group may not
    /// read it (403 `7000303`).
    func requireMemberListReader(_ group: Group, userID: String?, on db: PostgresConnection) throws {
        guard let member = try reader(group, userID: userID, on: db) else { return }
        if !GroupRole.canReadMembers(member.role, bigGroup: group.isBigGroup) {
            throw APIError(.bigGroupRestricted, "ordinary members cannot list the members of a big group")
        }
    }

    // MARK: - Hard user delete (docs/users.md)

    /// Removes a user being hard-deleted from every live group it is in (reason `deleted`, owner continuity,
    /// dismissal of a group it was the last member of). Runs inside the user service's transaction, before the
    /// user row goes; returns the events for the caller to append last.
    package func removeDeletedUser(_ userID: String, on db: PostgresConnection) throws -> [NewEvent] {
        var events: [NewEvent] = []
        for groupID in try GroupStore.groupIDs(appID: appID, userID: userID, on: db) {
            guard var group = try GroupStore.fetch(appID: appID, groupID: groupID, forUpdate: true, on: db), !group.isDismissed else {
                continue
            }
            // No tips message: the user is gone, and no tips message is written for a hard delete
            // (docs/groups.md#tips-messages).
            events += try removeMembers(&group, [userID], reason: "deleted", operator: nil, tips: nil, on: db).events
        }
        return events
    }
}

// MARK: - Lists

extension GroupService {
    /// Up to `limit` groups by `created_at` desc, then `group_id` desc, strictly after `after`, whose name matches
    /// every keyword (lowercased).
    func list(keywords: [String], includeDismissed: Bool, after: (createdAt: Int64, groupID: String)?, limit: Int) throws -> [Group] {
        try GroupStore.list(appID: appID, keywords: keywords, includeDismissed: includeDismissed, after: after, limit: limit, on: db)
    }

    /// A member of the group, or 404 `notMember`.
    func member(_ memberID: String, of groupID: String) throws -> GroupMember {
        guard let member = try GroupStore.member(appID: appID, groupID: groupID, userID: memberID, on: db) else {
            throw APIError.notGroupMember(memberID, groupID)
        }
        return member
    }

    /// The member list (docs/groups.md#lifecycle-and-membership) by role, `joined_at`, `user_id`, strictly after
    /// `after`.
    func members(
        of groupID: String, roles: [Int64]?, keywords: [String], after: (role: Int64, joinedAt: Int64, userID: String)?, limit: Int
    ) throws -> [GroupMember] {
        try GroupStore.listMembers(appID: appID, groupID: groupID, roles: roles, keywords: keywords, after: after, limit: limit, on: db)
    }

    /// The muted members of the group, by `user_id`, strictly after `after`.
    func mutedMembers(of groupID: String, after: String?, limit: Int) throws -> [GroupMember] {
        try GroupStore.mutedMembers(appID: appID, groupID: groupID, now: now, after: after, limit: limit, on: db)
    }

    /// The live groups `userID` is a member of, by `joined_at` desc, then `group_id` desc, strictly after `after`.
    func groups(
        of userID: String, keywords: [String], after: (joinedAt: Int64, groupID: String)?, limit: Int
    ) throws -> [GroupStore.Membership] {
        try GroupStore.userGroups(appID: appID, userID: userID, keywords: keywords, after: after, limit: limit, on: db)
    }
}
