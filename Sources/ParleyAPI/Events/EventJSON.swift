import ParleyCore

/// The one layout of an Event object (the Event schema of docs/api.md) up to its `data` value, and of the SSE frame
/// that carries it: `{"id":"…","type":…,"app_id":…,"created_at":…,"data":` and `id: …` / `event: …` / `data: ` before
/// it. The data (app view or a user view, ``EventUserView``) and `}` complete the object, so every rendering shares
/// this head: events read from the log and events this node has just committed (``CommittedEvents``) are written the
/// same way. (Webhook bodies are rendered in the outbox trigger with the same layout; WebhooksTests compares them.)
package enum EventJSON {
    /// The Event object up to its `data` value.
    package static func head(id: Int64, type: String, appID: String, createdAt: Int64) -> [UInt8] {
        var w = JSONWriter(capacity: 96 + type.utf8.count + appID.utf8.count)
        write(id: id, type: type, appID: appID, createdAt: createdAt, to: &w)
        return w.bytes
    }

    /// The SSE frame up to the Event's `data` value.
    package static func frameHead(id: Int64, type: String, appID: String, createdAt: Int64) -> [UInt8] {
        var frame: [UInt8] = []
        frame.reserveCapacity(128 + 2 * type.utf8.count + appID.utf8.count)
        frame += "id: ".utf8
        frame += String(id).utf8
        frame += "\nevent: ".utf8
        frame += type.utf8
        frame += "\ndata: ".utf8
        frame += head(id: id, type: type, appID: appID, createdAt: createdAt)
        return frame
    }

    private static func write(id: Int64, type: String, appID: String, createdAt: Int64, to w: inout JSONWriter) {
        w.beginObject()
        w.key(static: "id")
        w.writeString(String(id))
        w.key(static: "type")
        w.writeString(type)
        w.key(static: "app_id")
        w.writeString(appID)
        w.key(static: "created_at")
        w.writeInt(createdAt)
        w.key(static: "data")
    }
}
