import Foundation
import ParleyHTTP
import ParleyTesting
import Testing

@testable import ParleyAPI
@testable import ParleyCore

/// The event catalogue of `openapi/openapi.json` (its `webhooks`, docs/events.md) against what the server writes.
///
/// `scripts/openapi.py check` holds the documented types to the event type literals of the code; here the types
/// endpoints may subscribe to are held to the document, and the events a whole test run wrote are validated against
/// their webhook's body: `swift test` with `PARLEY_TEST_EVENTS=<file>` records them at exit (ParleyTesting), then
/// `PARLEY_TEST_EVENTS_CHECK=<file> swift test --skip-build --filter EventSchemaTests` checks each line (CI does both).
@Suite("Event schemas")
struct EventSchemaTests {
    /// The document's webhooks, split into the after-events of the log and the before-event hooks (by their body's
    /// envelope); the ping is neither.
    static func documentedTypes(_ spec: JSONValue) -> (events: Set<String>, hooks: Set<String>) {
        var events: Set<String> = []
        var hooks: Set<String> = []
        for (name, webhook) in spec["webhooks"]?.objectValue ?? JSONObject() {
            let schema = webhook["post"]?["requestBody"]?["content"]?["application/json"]?["schema"]
            let envelope = schema?["allOf"]?.arrayValue?.first?["$ref"]?.stringValue ?? schema?["$ref"]?.stringValue
            if envelope == "#/components/schemas/HookCall" {
                hooks.insert(name)
            } else if name != "webhook.ping" {
                events.insert(name)
            }
        }
        return (events, hooks)
    }

    @Test func endpointsSubscribeToExactlyTheDocumentedTypes() throws {
        let (events, hooks) = Self.documentedTypes(try OpenAPISpecTests.loadSpec())
        #expect(events.subtracting(WebhookEventTypes.afterTypes).sorted() == [], "documented, but endpoints cannot subscribe")
        #expect(WebhookEventTypes.afterTypes.subtracting(events).sorted() == [], "endpoints may subscribe, but not documented")
        #expect(hooks == WebhookEventTypes.beforeTypes)
    }

    /// The body schema of a webhook of the document.
    static func bodySchema(_ spec: JSONValue, _ type: String) -> JSONValue? {
        spec["webhooks"]?[type]?["post"]?["requestBody"]?["content"]?["application/json"]?["schema"]
    }

    /// One call of each before-event hook, as a receiver gets it, validates against its webhook's body (the run's
    /// recording sees only the calls the delivery log kept by the end of their test).
    @Test func everyHookCallMatchesItsSchema() throws {
        let f = try BeforeHookTests.Fixture(WebhookEventTypes.beforeTypes.sorted(), users: ["a", "b", "c", "d"])
        let app = f.app
        #expect(try f.send("hello").status == 201)
        #expect(try app.request(.post, "/v1/groups", json: #"{"operator":"a","group_id":"g1","name":"n","members":["b"]}"#).status == 201)
        #expect(try app.request(.patch, "/v1/groups/g1", json: #"{"operator":"a","join_mode":"any"}"#).status == 200)
        #expect(try app.request(.post, "/v1/groups/g1/join", json: #"{"user_id":"c"}"#).status == 200)
        #expect(try app.request(.post, "/v1/users/a/friends", json: #"{"friend_id":"d","wording":"hi"}"#).status == 201)
        #expect(try Calls.create(app, "a", ["b"]).status == 200)
        let spec = try OpenAPISpecTests.loadSpec()
        var validator = JSONSchemaValidator(document: spec)
        validator.rejectUndeclaredProperties = true
        var types: Set<String> = []
        for call in f.receiver.requests {
            let body = try #require(call.json)
            let type = body["type"]?.stringValue ?? ""
            types.insert(type)
            let schema = try #require(Self.bodySchema(spec, type), "\(type) has no webhook")
            #expect(validator.validate(body, against: schema).map(\.description) == [], "\(type)")
        }
        #expect(types == WebhookEventTypes.beforeTypes)
    }

    /// Every event (and hook call) a test run recorded validates against its webhook's body, with undeclared members
    /// rejected as for responses; a type without a webhook fails.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["PARLEY_TEST_EVENTS_CHECK"] != nil))
    func everyRecordedEventMatchesItsSchema() throws {
        let path = try #require(ProcessInfo.processInfo.environment["PARLEY_TEST_EVENTS_CHECK"])
        let spec = try OpenAPISpecTests.loadSpec()
        var validator = JSONSchemaValidator(document: spec)
        validator.rejectUndeclaredProperties = true
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var counts: [String: Int] = [:]
        var failures: [String: (count: Int, first: [String])] = [:]
        func fail(_ type: String, _ message: String) {
            var entry = failures[type, default: (0, [])]
            entry.count += 1
            if entry.first.count < 3 { entry.first.append(message) }
            failures[type] = entry
        }
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            guard let event = try? JSONValue.parse(Array(line.utf8), maxDepth: 256), let type = event["type"]?.stringValue else {
                fail("(unreadable)", String(line.prefix(200)))
                continue
            }
            counts[type, default: 0] += 1
            guard let schema = Self.bodySchema(spec, type) else {
                fail(type, "no webhook documents this type")
                continue
            }
            let problems = validator.validate(event, against: schema)
            if !problems.isEmpty {
                fail(type, "event \(event["id"]?.stringValue ?? "?"): " + problems.map(\.description).joined(separator: "; "))
            }
        }
        let total = counts.values.reduce(0, +)
        let (events, hooks) = Self.documentedTypes(spec)
        let unseen = events.union(hooks).subtracting(counts.keys).sorted()
        print("Event schemas: \(total) events and hook calls of \(counts.count) types validated; documented but not written: \(unseen)")
        #expect(total > 0, "\(path) holds no events")
        for (type, failure) in failures.sorted(by: { $0.key < $1.key }) {
            Issue.record("\(type): \(failure.count) of \(counts[type] ?? 0) invalid, e.g. \(failure.first.joined(separator: " | "))")
        }
    }
}
