import Glibc

/// A dedicated OS thread running one closure, joinable once.
///
/// For long-lived loops (timers, listeners) that must not occupy a pool worker or a cooperative-pool thread.
public final class BackgroundThread: Sendable {
    private let handle: LockedValue<pthread_t?>

    /// Starts a thread running `body`; it ends when `body` returns.
    public init(_ body: @escaping @Sendable () -> Void) {
        handle = LockedValue(nil)
        let box = Unmanaged.passRetained(Body(body))
        var tid = pthread_t()
        let rc = pthread_create(
            &tid, nil,
            { arg in
                Unmanaged<Body>.fromOpaque(arg!).takeRetainedValue().run()
                return nil
            }, box.toOpaque())
        precondition(rc == 0, "pthread_create failed: \(rc)")
        handle.withLock { $0 = tid }
    }

    /// Waits for `body` to return (the caller must have asked it to stop). Later calls return at once.
    public func join() {
        guard
            let tid = handle.withLock({ value -> pthread_t? in
                defer { value = nil }; return value
            })
        else { return }
        pthread_join(tid, nil)
    }

    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
}
