import ParleyAPI
import ParleyCore

/// Group profiles screened by the app's `group_profile` blocklists (docs/blocklists.md#profiles): `name`, `notice`
/// and `extended_data` masked, or the write refused (422 `content_blocked`) by `block` and `shadow_block`; a hit on
/// the written group goes to the hooks after the commit.
extension GroupService {
    func create(_ input: NewGroup, blocklists: BlocklistCache) throws -> (group: Group, outcomes: [String: MemberOutcome]) {
        var input = input
        let (fields, check) = try blocklists.screen(
            [input.name, input.notice, input.extendedData], scope: .groupProfile, appID: appID, userID: input.owner, now: now, on: db
        ) { screened in
            .group(groupID: input.groupID ?? "", snapshot: Self.attempted(input.groupID, screened))
        }
        (input.name, input.notice, input.extendedData) = (fields[0] ?? "", fields[1] ?? "", fields[2] ?? "")
        let created = try create(input)
        report(check, created.group, userID: input.owner, blocklists)
        return created
    }

    func update(_ groupID: String, actor: Actor, patch: Patch, blocklists: BlocklistCache) throws -> Group {
        var patch = patch
        let (fields, check) = try blocklists.screen(
            [patch.name, patch.notice, patch.extendedData], scope: .groupProfile, appID: appID, userID: actor.userID, now: now, on: db
        ) { screened in
            .group(groupID: groupID, snapshot: Self.attempted(groupID, screened))
        }
        (patch.name, patch.notice, patch.extendedData) = (fields[0], fields[1], fields[2])
        let group = try update(groupID, actor: actor, patch: patch)
        report(check, group, userID: actor.userID, blocklists)
        return group
    }

    private func report(_ check: BlocklistCheck?, _ group: Group, userID: String?, _ blocklists: BlocklistCache) {
        guard let check, case .object(let snapshot)? = try? JSONValue.parse(group.json(limits, now: now)),
            let hit = check.hit(appID: appID, userID: userID, target: .group(groupID: group.groupID, snapshot: snapshot), at: now)
        else { return }
        blocklists.report(hit)
    }

    /// The fields a refused write tried to set.
    private static func attempted(_ groupID: String?, _ fields: [String?]) -> JSONObject {
        var o: JSONObject = ["group_id": groupID.map(JSONValue.string) ?? .null]
        for (key, value) in zip(["name", "notice", "extended_data"], fields) {
            if let value { o[key] = .string(value) }
        }
        return o
    }
}
