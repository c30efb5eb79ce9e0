import ParleyAPI
import ParleyCore
import ParleyPostgres

/// A job (docs/jobs.md#the-job-object): long work answered with 202 and run in the background, in steps, on any node.
package struct BackgroundJob: Sendable {
    package enum State: String, CaseIterable, Sendable {
        case queued, running, succeeded, failed, cancelled

        /// Succeeded, failed or cancelled: nothing more happens to it.
        var isFinished: Bool { self == .succeeded || self == .failed || self == .cancelled }
    }

    package var jobID: String
    package var kind: String
    package var state: State
    /// The request that made it, as its kind reads it.
    package var params: JSONObject
    /// Where its next step resumes (the kind's own shape).
    package var checkpoint: JSONObject
    package var done: Int64
    package var total: Int64?
    package var result: JSONObject?
    package var problem: JSONObject?
    package var createdAt: Int64
    package var startedAt: Int64?
    package var finishedAt: Int64?
    package var cancelRequested: Bool
    /// The claims so far: a step commits only under the claim it runs for.
    package var attempt: Int64

    /// The Job object, fields in the documented order.
    package func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 256)
        o["job_id"] = jobID
        o["kind"] = kind
        o["state"] = state.rawValue
        o.write("progress") { w in
            w.object { w in
                w.key("done")
                w.write(.int(done))
                w.key("total")
                w.write(total.map(JSONValue.int) ?? .null)
            }
        }
        o["created_at"] = createdAt
        o["finished_at"] = finishedAt
        o["result"] = result.map(JSONValue.object)
        o["problem"] = problem.map(JSONValue.object)
        return o.finish()
    }

    /// The `problem` of a job that failed with `error`: the problem object of the API without `request_id`.
    static func problem(_ error: APIError) -> JSONObject {
        [
            "type": .string("urn:parley:error:\(error.code.code)"), "title": .string(error.code.name), "status": .int(Int64(error.status)),
            "detail": .string(error.detail), "code": .int(Int64(error.code.code)),
        ]
    }
}
