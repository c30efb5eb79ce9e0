import ParleyHTTP

/// Logs a background loop's failures once per outage instead of once per retry: the first failure as a warning with
/// its error, then nothing while the loop keeps failing, and one line when it works again. During a database stall
/// the loops retry every 100–200 ms; the circuit has already said that the database stopped answering.
///
/// Owner: the one thread whose loop it serves (a value in that loop).
package struct OutageLog {
    private let logger: Logger
    private let what: String
    private var failures = 0

    /// `what` names the loop's work in the log lines ("event sequencing").
    package init(logger: Logger, what: String) {
        self.logger = logger
        self.what = what
    }

    package mutating func failed(_ error: any Error) {
        failures += 1
        if failures == 1 { logger.warning("msg=\"\(what) failed; retrying\" error=\"\(error)\"") }
    }

    package mutating func succeeded() {
        if failures > 0 { logger.info("msg=\"\(what) works again\" failed_tries=\(failures)") }
        failures = 0
    }
}
