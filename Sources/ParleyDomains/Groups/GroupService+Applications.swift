import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Join and invite applications (docs/groups.md#applications): accept and reject. Creation happens in
/// ``GroupService/join`` and ``GroupService/invite``; expiry in ``GroupApplicationExpiry``.
extension GroupService {
    /// Accepts a waiting application: a `join` by the owner or an admin, an `invite` by the invitee. The user
    /// becomes a member (`join_apply` / `invite_apply`).
    func accept(_ applicationID: String, actor: Actor, push: JSONValue?) throws -> GroupApplication {
        try answer(applicationID, actor: actor, push: push) { application, group, db in
            try acceptChecks(application, group, on: db)
            application.state = .accepted
            let row =
                application.type == .join
                ? NewMemberRow(userID: application.userID, enterType: .joinApply, operatedBy: actor.userID)
                : NewMemberRow(userID: application.userID, enterType: .inviteApply, operatedBy: application.inviterID)
            // The tips operator is who brought the user in: the approver of a join, the inviter of an invite.
            let tips: (event: GroupTips.Event, operator: String?) =
                application.type == .join ? (.joined, actor.userID) : (.invited, application.inviterID)
            let joined = try addMembers(&group, [row], via: "application", operator: actor.userID, tips: tips, on: db)
            return joined.events
        }
    }

    /// The application an accept would make its applicant or invitee join, from an unlocked read and with every
    /// check of the accept, in the accept's order: what the `group.before_join` hook is asked about before the write (a
    /// rejecting hook leaves the application waiting). The accept re-checks everything under its locks.
    func acceptable(_ applicationID: String, actor: Actor) throws -> GroupApplication {
        guard let application = try GroupApplicationStore.fetch(appID: appID, applicationID: applicationID, on: db) else {
            throw APIError(.notFound, "application \(applicationID) does not exist")
        }
        let group = try active(application.groupID, lock: false, on: db)
        try answerChecks(application, group, actor: actor, on: db)
        try acceptChecks(application, group, on: db)
        return application
    }

    /// The checks an accept adds to ``answerChecks(_:_:actor:on:)``: 422 `group_full`, 409 `already_group_member`.
    private func acceptChecks(_ application: GroupApplication, _ group: Group, on db: PostgresConnection) throws {
        try requireSeats(group, 1)
        if try GroupStore.member(appID: appID, groupID: group.groupID, userID: application.userID, on: db) != nil {
            throw APIError(.alreadyGroupMember, "user \(application.userID) is already a member of group \(group.groupID)")
        }
    }

    /// Rejects a waiting application (same operator rule as accept).
    func reject(_ applicationID: String, actor: Actor, push: JSONValue?) throws -> GroupApplication {
        try answer(applicationID, actor: actor, push: push) { application, _, _ in
            application.state = .rejected
            return []
        }
    }

    /// The shared steps of accept and reject, checked in this order: 404 `not_found`, the group (409
    /// `group_dismissed`), the operator (403 `group_permission_denied`), 409 `application_expired`, 409
    /// `application_not_waiting`; then `decide` sets the state and returns its own events, which follow
    /// `group.application_updated`.
    private func answer(
        _ applicationID: String, actor: Actor, push: JSONValue?,
        _ decide: (_ application: inout GroupApplication, _ group: inout Group, _ db: PostgresConnection) throws -> [NewEvent]
    ) throws -> GroupApplication {
        try db.transaction { db in
            guard let peek = try GroupApplicationStore.fetch(appID: appID, applicationID: applicationID, on: db) else {
                throw APIError(.notFound, "application \(applicationID) does not exist")
            }
            // The group row first, then the application row: the order every membership change locks in.
            var group = try lockActive(peek.groupID, on: db)
            guard var application = try GroupApplicationStore.fetch(appID: appID, applicationID: applicationID, forUpdate: true, on: db)
            else { throw APIError(.notFound, "application \(applicationID) does not exist") }
            try answerChecks(application, group, actor: actor, on: db)
            let decided = try decide(&application, &group, db)
            application.operatedBy = actor.userID ?? (application.type == .invite ? application.userID : nil)
            application.updatedAt = now
            try GroupApplicationStore.save(appID: appID, application, push: push, on: db)
            let managers = application.type == .join ? try managerIDs(group.groupID, on: db) : []
            try EventLog.append([application.event("group.application_updated", managers: managers)] + decided, appID: appID, now: now, on: db)
            return application
        }
    }

    /// The checks of an accept or reject after the group's: the operator (403 `group_permission_denied`), 409
    /// `application_expired`, 409 `application_not_waiting`.
    private func answerChecks(_ application: GroupApplication, _ group: Group, actor: Actor, on db: PostgresConnection) throws {
        let applicationID = application.applicationID
        if actor.checks, let userID = actor.userID {
            switch application.type {
            case .join:
                let op = try operatorMember(actor, group, on: db)
                try permit(op.map { GroupRole.canManageMembers($0.role) }, "only the owner and admins may answer join applications")
            case .invite:
                if userID != application.userID { throw Self.denied("only the invitee may answer an invite application") }
            }
        }
        if application.asOf(now).state == .expired { throw APIError(.applicationExpired, "application \(applicationID) has expired") }
        guard application.state == .waiting else {
            throw APIError(.applicationNotWaiting, "application \(applicationID) is \(application.state.rawValue)")
        }
    }

    /// A page of the group's applications for the app or its owner/admins (403 `group_permission_denied` for
    /// members, `not_group_member` for others).
    func groupApplications(
        _ groupID: String, reader userID: String?, type: GroupApplication.Kind?, state: GroupApplication.State?,
        after: (createdAt: Int64, applicationID: String)?, limit: Int, on db: PostgresConnection
    ) throws -> [GroupApplication] {
        let group = try get(groupID, on: db)
        if let member = try reader(group, userID: userID, on: db), !GroupRole.canManageMembers(member.role) {
            throw Self.denied("only the owner and admins may list applications")
        }
        return try GroupApplicationStore.list(
            appID: appID, scope: .group(groupID), type: type, state: state, now: now, after: after, limit: limit, on: db
        ).map { $0.asOf(now) }
    }

    /// A page of the applications where `userID` (an existing user) is applicant, invitee or inviter.
    func userApplications(
        _ userID: String, type: GroupApplication.Kind?, state: GroupApplication.State?, after: (createdAt: Int64, applicationID: String)?,
        limit: Int, on db: PostgresConnection
    ) throws -> [GroupApplication] {
        try UserService.requireActive(userID, appID: appID, on: db)
        return try GroupApplicationStore.list(
            appID: appID, scope: .user(userID), type: type, state: state, now: now, after: after, limit: limit, on: db
        ).map { $0.asOf(now) }
    }
}
