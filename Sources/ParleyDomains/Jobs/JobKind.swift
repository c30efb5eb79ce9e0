import ParleyAPI
import ParleyCore
import ParleyPostgres

/// What a job kind's `plan` decided when the job was created: how much work there is (nil: unknown) and the checkpoint
/// its first step starts from.
package struct JobPlan: Sendable {
    package var total: Int64?
    package var checkpoint: JSONObject

    package init(total: Int64?, checkpoint: JSONObject) {
        self.total = total
        self.checkpoint = checkpoint
    }
}

/// What one step did (docs/jobs.md#adding-a-job-kind): the checkpoint the next step resumes from (nil: the job is done
/// and `result` is its result), and how much of the total it did.
package struct JobStepOutcome: Sendable {
    package var checkpoint: JSONObject?
    package var progress: Int64
    package var result: JSONObject?

    /// More to do: the next step starts from `checkpoint`.
    package static func next(_ checkpoint: JSONObject, progress: Int64) -> JobStepOutcome {
        JobStepOutcome(checkpoint: checkpoint, progress: progress, result: nil)
    }

    /// Done with `result`.
    package static func finished(_ result: JSONObject, progress: Int64) -> JobStepOutcome {
        JobStepOutcome(checkpoint: nil, progress: progress, result: result)
    }
}

/// A kind of job (docs/jobs.md#adding-a-job-kind): its name and two closures, registered by the app layer
/// (App/Routes.swift) with the node's ``JobRunner`` and handed to the route that creates it.
package struct JobKind: Sendable {
    /// Where a step or a plan runs: the job's app, the server time, and the connection of its transaction.
    package struct Context {
        package let db: PostgresConnection
        package let appID: String
        package let now: Int64
    }

    package let name: String
    /// Validates the request (`params`) and counts the work, in the creating request's transaction: throws the
    /// request's problem (the job is not created), or returns the total and the first checkpoint. The app's settings
    /// are the request's: what a step needs of them goes into the checkpoint (steps run with no request).
    package let plan: @Sendable (_ params: JSONObject, _ settings: AppSettings, _ context: Context) throws -> JobPlan
    /// One bounded piece of work from `checkpoint`, in the step's transaction, which also writes the new checkpoint
    /// and progress (so a node that takes the job over resumes exactly after it). Keep it well under a second: the
    /// progress is written once per step, and the step holds its locks until it commits. A thrown ``APIError`` fails
    /// the job with that problem (the step's writes roll back); a database outage leaves the job to be resumed.
    package let step: @Sendable (_ params: JSONObject, _ checkpoint: JSONObject, _ context: Context) throws -> JobStepOutcome

    /// How much the runner rests after each step, as a share of the step's time (0: none; 1: as long as the step took,
    /// at most ``maxRestMillis``): a kind whose steps compete with requests for the database's CPU leaves them room.
    package var restRatio: Double = 0
    /// The longest rest after a step (progress is still written about once a second).
    package static let maxRestMillis = 400

    package init(
        name: String, plan: @escaping @Sendable (_ params: JSONObject, _ settings: AppSettings, _ context: Context) throws -> JobPlan,
        step: @escaping @Sendable (_ params: JSONObject, _ checkpoint: JSONObject, _ context: Context) throws -> JobStepOutcome
    ) {
        self.name = name
        self.plan = plan
        self.step = step
    }
}
