import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// A manually advanced monotonic clock for deterministic bucket tests.
private final class FakeClock: Sendable {
    let nanos = Atomic<UInt64>(1_000_000_000)
    func advance(seconds: Double) { nanos.add(UInt64(seconds * 1e9), ordering: .relaxed) }
    var read: @Sendable () -> UInt64 { { self.nanos.load(ordering: .relaxed) } }
}

@Suite("Rate limiter")
struct RateLimiterTests {
    @Test func burstOfTwiceTheRateThenRefusal() {
        let clock = FakeClock()
        let limiter = RateLimiter(clock: clock.read)
        for i in 0..<20 {
            let d = limiter.take(key: "user:a:u1", ratePerSecond: 10)
            #expect(d.allowed, "request \(i)")
            #expect(d.limit == 10)
            #expect(d.remaining == 19 - i)
            #expect(d.retryAfterSeconds == 0)
        }
        let refused = limiter.take(key: "user:a:u1", ratePerSecond: 10)
        #expect(!refused.allowed)
        #expect(refused.remaining == 0)
        #expect(refused.retryAfterSeconds == 1)
        #expect(refused.resetSeconds == 2)
        // Other keys are independent.
        #expect(limiter.take(key: "user:a:u2", ratePerSecond: 10).allowed)
    }

    @Test func newBucketStartsFullAndReportsReset() {
        let limiter = RateLimiter(clock: FakeClock().read)
        let d = limiter.take(key: "app:a", ratePerSecond: 200)
        #expect(d.allowed && d.limit == 200 && d.remaining == 399)
        #expect(d.resetSeconds == 1)  // 1 token missing at 200/s → rounds up to 1 s
    }

    @Test func refill() {
        let clock = FakeClock()
        let limiter = RateLimiter(clock: clock.read)
        for _ in 0..<2 { #expect(limiter.take(key: "k", ratePerSecond: 1).allowed) }
        #expect(!limiter.take(key: "k", ratePerSecond: 1).allowed)
        clock.advance(seconds: 0.5)
        let half = limiter.take(key: "k", ratePerSecond: 1)
        #expect(!half.allowed)
        #expect(half.retryAfterSeconds == 1)
        clock.advance(seconds: 0.5)
        #expect(limiter.take(key: "k", ratePerSecond: 1).allowed)
        #expect(!limiter.take(key: "k", ratePerSecond: 1).allowed)
        // Long idle refills only up to the capacity.
        clock.advance(seconds: 3600)
        #expect(limiter.take(key: "k", ratePerSecond: 1).remaining == 1)
        #expect(limiter.take(key: "k", ratePerSecond: 1).allowed)
        #expect(!limiter.take(key: "k", ratePerSecond: 1).allowed)
    }

    @Test func retryAfterAtLowRates() {
        let clock = FakeClock()
        let limiter = RateLimiter(clock: clock.read)
        // Rates below 1/s are clamped to 1/s.
        #expect(limiter.take(key: "z", ratePerSecond: 0).limit == 1)
        let limiter2 = RateLimiter(clock: clock.read)
        for _ in 0..<4 { _ = limiter2.take(key: "x", ratePerSecond: 2) }
        let d = limiter2.take(key: "x", ratePerSecond: 2)
        #expect(!d.allowed && d.retryAfterSeconds == 1 && d.resetSeconds == 2)
    }

    @Test func idleFullBucketsArePruned() {
        let clock = FakeClock()
        let limiter = RateLimiter(pruneInterval: 10, clock: clock.read)
        for i in 0..<100 { _ = limiter.take(key: "k\(i)", ratePerSecond: 5) }
        #expect(limiter.bucketCount == 100)
        clock.advance(seconds: 1)
        _ = limiter.take(key: "busy", ratePerSecond: 5)
        clock.advance(seconds: 10)
        for _ in 0..<5 { _ = limiter.take(key: "busy", ratePerSecond: 1) }
        clock.advance(seconds: 0.1)
        // The next take prunes: only "busy" (drained just now) survives, besides the key being taken.
        _ = limiter.take(key: "fresh", ratePerSecond: 5)
        #expect(limiter.bucketCount == 2)
        // Pruning a full bucket is invisible: it comes back full.
        #expect(limiter.take(key: "k1", ratePerSecond: 5).remaining == 9)
    }

    @Test func concurrentTakesNeverOvergrant() async {
        let limiter = RateLimiter(clock: FakeClock().read)
        let allowed = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var n = 0
                    for _ in 0..<100 where limiter.take(key: "shared", ratePerSecond: 50).allowed { n += 1 }
                    return n
                }
            }
            return await group.reduce(0, +)
        }
        #expect(allowed == 100)
    }
}
