import ParleySync
import Synchronization

/// Token-bucket rate limiting per credential (docs/errors.md#rate-limits).
///
/// Each key (`"app:<app_id>"`, `"user:<app_id>:<user_id>"`, `"send:<app_id>:<user_id>"` …) has a bucket that holds
/// at most `2 × rate` tokens, refills continuously at `rate` per second and starts full. A request takes one
/// token. Buckets that have refilled completely are indistinguishable from new ones, so they are pruned
/// periodically; memory is bounded by the keys active in the last `2 s` (the time to refill) plus the prune period.
///
/// Thread-safe: the bucket table is owned by a `LockedValue`, held only for the arithmetic of one `take`.
public final class RateLimiter: Sendable {
    /// The outcome of one `take`, with the values of the `RateLimit-*` and `Retry-After` headers.
    public struct Decision: Sendable, Equatable {
        /// Whether the request may proceed.
        public var allowed: Bool
        /// `RateLimit-Limit`: the rate per second.
        public var limit: Int
        /// `RateLimit-Remaining`: whole tokens left after this request.
        public var remaining: Int
        /// `RateLimit-Reset`: seconds until the bucket is full again (rounded up).
        public var resetSeconds: Int
        /// `Retry-After` for a refusal: seconds until one token is available (≥ 1); 0 when allowed.
        public var retryAfterSeconds: Int
    }

    private struct Bucket {
        var tokens: Double
        var updatedAt: UInt64  // ns on the limiter's monotonic clock
        var rate: Double  // the rate of the last take, so pruning knows when the bucket is full
    }

    private struct State {
        var buckets: [String: Bucket] = [:]
        var lastPrune: UInt64 = 0
    }

    private let state = LockedValue(State())
    private let clock: @Sendable () -> UInt64
    private let pruneIntervalNanos: UInt64

    /// - Parameters:
    ///   - pruneInterval: how often (at most) idle full buckets are dropped, in seconds.
    ///   - clock: monotonic nanoseconds; defaults to `ContinuousClock`. Tests pass a fake.
    public init(pruneInterval: Double = 30, clock: (@Sendable () -> UInt64)? = nil) {
        self.pruneIntervalNanos = UInt64(pruneInterval * 1e9)
        if let clock {
            self.clock = clock
        } else {
            let origin = ContinuousClock.now
            self.clock = {
                let d = ContinuousClock.now - origin
                return UInt64(d.components.seconds) &* 1_000_000_000
                    &+ UInt64(d.components.attoseconds / 1_000_000_000)
            }
        }
    }

    /// Takes one token from the bucket `key` whose rate is `ratePerSecond` (must be ≥ 1).
    public func take(key: String, ratePerSecond: Int) -> Decision {
        let rate = Double(max(1, ratePerSecond))
        let capacity = 2 * rate
        return state.withLock { state in
            // Read under the lock so successive takes see non-decreasing times; a reading taken before the lock
            // could be older than the bucket's last update.
            let now = clock()
            if Self.elapsed(from: state.lastPrune, to: now) >= pruneIntervalNanos {
                Self.prune(&state, now: now)
            }
            // One hash lookup: the bucket is updated in place (a new one starts full).
            return Self.take(
                &state.buckets[key, default: Bucket(tokens: capacity, updatedAt: now, rate: rate)],
                now: now, rate: rate)
        }
    }

    /// Gives back the token a `take` of the bucket `key` took (a request that will be handled, and take it, again).
    public func giveBack(key: String, ratePerSecond: Int) {
        let capacity = 2 * Double(max(1, ratePerSecond))
        state.withLock { state in
            if let tokens = state.buckets[key]?.tokens { state.buckets[key]?.tokens = min(capacity, tokens + 1) }
        }
    }

    private static func take(_ bucket: inout Bucket, now: UInt64, rate: Double) -> Decision {
        let capacity = 2 * rate
        let elapsed = Double(Self.elapsed(from: bucket.updatedAt, to: now)) / 1e9
        // A rate lowered since the last request shrinks the bucket to the new capacity at once.
        bucket.tokens = min(capacity, bucket.tokens + elapsed * rate)
        bucket.updatedAt = now
        bucket.rate = rate
        let allowed = bucket.tokens >= 1
        if allowed { bucket.tokens -= 1 }
        let toFull = (capacity - bucket.tokens) / rate
        return Decision(
            allowed: allowed,
            limit: Int(rate),
            remaining: Int(bucket.tokens.rounded(.down)),
            resetSeconds: Int(toFull.rounded(.up)),
            retryAfterSeconds: allowed ? 0 : max(1, Int(((1 - bucket.tokens) / rate).rounded(.up)))
        )
    }

    /// Nanoseconds from `start` to `end`, 0 if the clock went backwards (a fake clock, or a custom one).
    private static func elapsed(from start: UInt64, to end: UInt64) -> UInt64 { end > start ? end - start : 0 }

    /// Number of live buckets (for metrics and tests).
    public var bucketCount: Int { state.withLock { $0.buckets.count } }

    /// Drops every bucket that has refilled completely: it behaves exactly like a new bucket, so forgetting it
    /// changes no decision.
    private static func prune(_ state: inout State, now: UInt64) {
        state.lastPrune = now
        state.buckets = state.buckets.filter { _, b in
            b.tokens + Double(elapsed(from: b.updatedAt, to: now)) / 1e9 * b.rate < 2 * b.rate
        }
    }
}
