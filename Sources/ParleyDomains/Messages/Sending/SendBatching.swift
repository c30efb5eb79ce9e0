/// How a writer of ``MessageWriter`` takes its next batch from the sends queued for it: a pure decision, apart from the
/// writer's threads, so it can be checked on its own.
enum SendBatching {
    /// The first batch of `queued` in queue order, at most `limit` long, and the rest in queue order. A send whose
    /// `duplicateKey` (app, sender and `client_msg_id`; nil without one) is already in the batch waits for the next
    /// one, where it finds the first one's key and answers as its duplicate.
    static func split<Send>(_ queued: [Send], limit: Int, duplicateKey: (Send) -> String?) -> (batch: [Send], rest: [Send]) {
        var batch: [Send] = []
        var rest: [Send] = []
        var keys: Set<String> = []
        for send in queued {
            let fresh = duplicateKey(send).map { keys.insert($0).inserted } ?? true
            if fresh && batch.count < limit { batch.append(send) } else { rest.append(send) }
        }
        return (batch, rest)
    }
}
