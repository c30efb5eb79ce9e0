import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Every cell of the role matrix (docs/groups.md#roles), allowed and denied, through the HTTP API with the operator's
/// user token.
@Suite("Group role matrix", .inProcess)
struct GroupRoleMatrixTests: GroupTestSupport {
    /// One cell: `op` does the request on a fresh group of owner `o`, admins `a`/`a2`, members `m`/`m2`, custom
    /// role `c` (5); `code` is the request-level error (nil for success) and `itemCode` a batch item's.
    struct Cell {
        var name: String
        var op: String
        var method: HTTPMethod
        var path: String
        var body: String
        var status: Int
        var code: Int?
        var itemCode: Int? = nil
        var inviteAdminOnly = false
        var bigGroup = false
    }

    static let cells: [Cell] = {
        var cells: [Cell] = []
        for (op, ok) in [("o", true), ("a", true), ("m", false), ("c", false)] {
            cells.append(
                Cell(
                    name: "update \(op)", op: op, method: .patch, path: "", body: #"{"name":"n"}"#, status: ok ? 200 : 403,
                    code: ok ? nil : ErrorCode.groupPermissionDenied.code
                ))
            cells.append(
                Cell(
                    name: "group mute \(op)", op: op, method: .put, path: "/mute", body: #"{"mode":"all","duration_s":60}"#, status: ok ? 200 : 403,
                    code: ok ? nil : ErrorCode.groupPermissionDenied.code))
            cells.append(
                Cell(name: "attributes \(op)", op: op, method: .post, path: "/attributes", body: #"{"attributes":{"k":"v"}}"#, status: 200, code: nil)
            )
            cells.append(
                Cell(name: "invite any \(op)", op: op, method: .post, path: "/members/invite", body: #"{"user_ids":["x"]}"#, status: 200, code: nil))
            cells.append(
                Cell(
                    name: "invite admin-only \(op)", op: op, method: .post, path: "/members/invite", body: #"{"user_ids":["x"]}"#,
                    status: ok ? 200 : 403, code: ok ? nil : ErrorCode.groupPermissionDenied.code, inviteAdminOnly: true))
            cells.append(Cell(name: "member list \(op)", op: op, method: .get, path: "/members", body: "", status: 200, code: nil))
            cells.append(
                Cell(
                    name: "big member list \(op)", op: op, method: .get, path: "/members", body: "", status: ok ? 200 : 403,
                    code: ok ? nil : ErrorCode.bigGroupRestricted.code, bigGroup: true))
        }
        for (op, ok) in [("o", true), ("a", false), ("m", false), ("c", false)] {
            cells.append(
                Cell(
                    name: "set role \(op)", op: op, method: .put, path: "/members/m2/role", body: #"{"role":2}"#, status: ok ? 200 : 403,
                    code: ok ? nil : ErrorCode.groupPermissionDenied.code))
            cells.append(
                Cell(
                    name: "transfer \(op)", op: op, method: .post, path: "/transfer_owner", body: #"{"to_user_id":"m2"}"#, status: ok ? 200 : 403,
                    code: ok ? nil : ErrorCode.groupPermissionDenied.code))
            cells.append(
                Cell(
                    name: "dismiss \(op)", op: op, method: .post, path: "/dismiss", body: "{}", status: ok ? 200 : 403,
                    code: ok ? nil : ErrorCode.groupPermissionDenied.code))
        }
        // Kick and member mute: owner → anyone but the owner; admin → members only; member → no.
        for (action, path, extra) in [("kick", "/members/kick", ""), ("mute", "/members/mute", #","duration_s":60"#)] {
            for (op, target, item) in [
                ("o", "a", nil), ("o", "m", nil), ("o", "c", nil),
                ("o", "o", action == "kick" ? ErrorCode.invalidParams.code : ErrorCode.groupPermissionDenied.code),
                ("a", "m", nil), ("a", "c", nil), ("a", "a2", ErrorCode.groupPermissionDenied.code), ("a", "o", ErrorCode.groupPermissionDenied.code),
            ] as [(String, String, Int?)] {
                cells.append(
                    Cell(
                        name: "\(action) \(op)→\(target)", op: op, method: .post, path: path, body: "{\"user_ids\":[\"\(target)\"]\(extra)}",
                        status: 200, code: nil, itemCode: item))
            }
            for op in ["m", "c"] {
                cells.append(
                    Cell(
                        name: "\(action) \(op)", op: op, method: .post, path: path, body: "{\"user_ids\":[\"m2\"]\(extra)}", status: 403,
                        code: ErrorCode.groupPermissionDenied.code))
            }
        }
        // Nickname: owner anyone; admin itself and members; member itself.
        for (op, target, ok) in [
            ("o", "a", true), ("o", "m", true), ("a", "a", true), ("a", "m", true), ("a", "c", true), ("a", "a2", false), ("a", "o", false),
            ("m", "m", true), ("m", "m2", false), ("c", "c", true), ("c", "m", false),
        ] {
            cells.append(
                Cell(
                    name: "nickname \(op)→\(target)", op: op, method: .put, path: "/members/\(target)/nickname", body: #"{"nickname":"n"}"#,
                    status: ok ? 200 : 403, code: ok ? nil : ErrorCode.groupPermissionDenied.code))
        }
        // Answering join applications: owner and admins.
        for (op, ok) in [("o", true), ("a", true), ("m", false), ("c", false)] {
            cells.append(
                Cell(
                    name: "accept join \(op)", op: op, method: .post, path: "accept", body: "{}", status: ok ? 200 : 403,
                    code: ok ? nil : ErrorCode.groupPermissionDenied.code)
            )
        }
        return cells
    }()

    @Test func everyCell() throws {
        try withApp(testClock: true) { server, app in
            let tokens = try Dictionary(
                uniqueKeysWithValues: ["o", "a", "a2", "m", "m2", "c", "x", "j"].map { id in
                    try app.createUser(id)
                    return (id, try app.token(for: id))
                })
            var failures = 0
            for (i, cell) in Self.cells.enumerated() {
                let g = "rm\(i)"
                let extra = cell.inviteAdminOnly ? #","invite_mode":"admin""# : cell.path == "accept" ? #","join_mode":"auth""# : ""
                try Self.createGroup(
                    app, "o", members: ["a", "a2", "m", "m2", "c"], extra: ",\"group_id\":\"\(g)\",\"big_group\":\(cell.bigGroup)\(extra)")
                try Self.setRole(app, g, "a", 2)
                try Self.setRole(app, g, "a2", 2)
                try Self.setRole(app, g, "c", 5)
                var method = cell.method
                var path = "/v1/groups/\(g)\(cell.path)"
                if cell.path == "accept" {
                    let applied = try Self.asUser(app, tokens["j"]!, .post, "/v1/groups/\(g)/join", json: "{}")
                    #expect(applied.status == 202, "\(applied.text)")
                    path = "/v1/group_applications/\(applied.json?["application_id"]?.stringValue ?? "")/accept"
                    method = .post
                }
                // With a user token (the operator itself) …
                let r = try Self.asUser(app, tokens[cell.op]!, method, path, json: method == .get ? nil : cell.body)
                if let code = cell.code {
                    Self.expectProblem(r, cell.status, code, cell.name)
                } else {
                    #expect(r.status == cell.status, "\(cell.name): \(r.text)")
                    if cell.itemCode != nil || r.json?["results"] != nil {
                        #expect(Self.codes(r).first == .some(cell.itemCode), "\(cell.name): \(r.text)")
                    }
                }
                if r.status != cell.status { failures += 1 }
            }
            #expect(failures == 0)
            // Outsiders act on no group (403 6000521), and the app with `operator` gets the same answers as the token.
            try Self.createGroup(app, "o", members: ["m"], extra: #","group_id":"out""#)
            Self.expectProblem(
                try Self.asUser(app, tokens["x"]!, .post, "/v1/groups/out/attributes", json: #"{"attributes":{"k":"v"}}"#), 403, .notGroupMember)
            Self.expectProblem(try app.request(.patch, "/v1/groups/out", json: #"{"operator":"m","name":"n"}"#), 403, .groupPermissionDenied)
            // `skip_checks` (app key) bypasses the matrix; the app without operator is not checked either.
            #expect(try app.request(.patch, "/v1/groups/out", json: #"{"operator":"m","name":"n","skip_checks":true}"#).status == 200)
            #expect(try app.request(.post, "/v1/groups/out/dismiss", json: "{}").status == 200)
        }
    }
}
