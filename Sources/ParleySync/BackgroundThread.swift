import CParleyShims
import Glibc

/// A dedicated, named OS thread running one closure, joinable once.
///
/// For long-lived loops (timers, listeners, pool workers) that must not occupy a pool worker or a
/// cooperative-pool thread.
public final class BackgroundThread: Sendable {
    private let handle: LockedValue<pthread_t?>

    /// Starts a thread named `name` (first 15 bytes, as Linux allows) running `body`; it ends when `body`
    /// returns.
    public init(name: String, _ body: @escaping @Sendable () -> Void) {
        handle = LockedValue(Self.start(name: name, body))
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

    /// Starts a joinable thread running `body` and returns its handle (for owners that join or detach it
    /// themselves).
    public static func start(name: String, _ body: @escaping @Sendable () -> Void) -> pthread_t {
        let box = Unmanaged.passRetained(
            Body {
                parley_set_current_thread_name(String(name.prefix(15)))
                body()
            })
        var tid = pthread_t()
        let rc = pthread_create(
            &tid, nil,
            { arg in
                Unmanaged<Body>.fromOpaque(arg!).takeRetainedValue().run()
                return nil
            }, box.toOpaque())
        precondition(rc == 0, "pthread_create failed: \(rc)")
        return tid
    }

    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
}
