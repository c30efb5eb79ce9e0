import Testing

@testable import ParleyDomains

/// ``SendBatching``: how a message writer splits the sends queued for it into the batch it writes now and the rest.
@Suite("Send batching")
struct SendBatchingTests {
    /// A queued send: its place in the queue and its duplicate key (nil: no `client_msg_id`).
    struct Send: Equatable {
        let position: Int
        let key: String?
    }

    static func split(_ keys: [String?], limit: Int = 256) -> (batch: [Int], rest: [Int]) {
        let queued = keys.enumerated().map { Send(position: $0.offset, key: $0.element) }
        let (batch, rest) = SendBatching.split(queued, limit: limit, duplicateKey: \.key)
        return (batch.map(\.position), rest.map(\.position))
    }

    @Test func everythingQueuedGoesInOneBatchUpToTheLimit() {
        let (batch, rest) = Self.split([nil, "a", "b", nil])
        #expect(batch == [0, 1, 2, 3])
        #expect(rest.isEmpty)
        #expect(Self.split([]) == ([], []))
    }

    @Test func theLimitBoundsTheBatchAndTheRestKeepsQueueOrder() {
        let (batch, rest) = Self.split([nil, "a", nil, "b", nil], limit: 2)
        #expect(batch == [0, 1])
        #expect(rest == [2, 3, 4])
    }

    @Test func aRepeatedKeyWaitsForTheNextBatch() {
        // The second "a" waits; so does the third, which the next split must also hold back behind the second.
        let first = Self.split(["a", "b", "a", nil, "a"])
        #expect(first.batch == [0, 1, 3])
        #expect(first.rest == [2, 4])
        let second = Self.split(["a", "a"])
        #expect(second == ([0], [1]))
    }

    @Test func sendsWithoutAKeyNeverWaitForEachOther() {
        #expect(Self.split([nil, nil, nil]) == ([0, 1, 2], []))
    }

    /// Draining a queue batch by batch, as a writer does, writes every send once, and two sends of one key in
    /// different batches in their queue order.
    @Test func drainingWritesEachSendOnceInKeyOrder() {
        var pending = (0..<1_000).map { Send(position: $0, key: $0 % 7 == 0 ? nil : "k\($0 % 5)") }
        var written: [Send] = []
        var batches = 0
        while !pending.isEmpty {
            let (batch, rest) = SendBatching.split(pending, limit: 64, duplicateKey: \.key)
            #expect(!batch.isEmpty && batch.count <= 64)
            #expect(Set(batch.compactMap(\.key)).count == batch.filter { $0.key != nil }.count, "no key twice in a batch")
            written += batch
            pending = rest
            batches += 1
        }
        #expect(written.map(\.position).sorted() == Array(0..<1_000))
        for key in (0..<5).map({ "k\($0)" }) {
            let positions = written.filter { $0.key == key }.map(\.position)
            #expect(positions == positions.sorted(), "sends of \(key) keep their order")
        }
        // A key goes at most once into a batch, and each batch takes the next send of every key: the busiest key sets
        // how many batches the queue takes.
        let busiest = (0..<5).map { key in written.filter { $0.key == "k\(key)" }.count }.max()!
        #expect(batches == busiest)
    }
}
