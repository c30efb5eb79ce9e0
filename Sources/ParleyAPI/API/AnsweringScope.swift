import Glibc
import ParleyHTTP

/// The app request a handler is answering, readable anywhere below it while it runs (``current``).
///
/// For the few values a response holds that depend on the request rather than on stored data and are written deep
/// inside shared renderers: a message body that names an uploaded file is stored with its `file_id` and answered with
/// download URLs signed for this request's host and the app's URL lifetime (docs/files.md#files-in-messages). Passing
/// the request down every message renderer (twenty read paths) for that one use would put it in every signature.
package struct AnsweringScope: Sendable {
    package let app: AppRecord
    package let request: Request
    /// Server-clock milliseconds of the request.
    package let now: Int64
    package let services: Services

    /// The request being answered on this thread (bound by the request pipeline around the handler, ``answering(_:_:)``);
    /// nil outside a handler, e.g. on the message writer's thread.
    package static var current: AnsweringScope? { Slot.ofThisThread.scope }

    /// Runs `body` with `scope` as ``current`` on this thread.
    ///
    /// A slot per thread rather than a task-local: every app request binds one, and a task-local's push allocates on
    /// each (GET /v1/users/{id} measured 12% more of Parley's CPU with it, bench/RESULTS.md).
    static func answering<T>(_ scope: AnsweringScope, _ body: () throws -> T) rethrows -> T {
        let slot = Slot.ofThisThread
        let outer = slot.scope
        slot.scope = scope
        defer { slot.scope = outer }
        return try body()
    }

    /// One thread's scope. Owner: its thread (no other thread reads or writes it).
    private final class Slot {
        var scope: AnsweringScope?

        private static let key: pthread_key_t = {
            var key = pthread_key_t()
            // A thread that ends releases its slot.
            let result = pthread_key_create(&key) { raw in if let raw { Unmanaged<Slot>.fromOpaque(raw).release() } }
            precondition(result == 0, "pthread_key_create failed")
            return key
        }()

        static var ofThisThread: Slot {
            if let raw = pthread_getspecific(key) { return Unmanaged<Slot>.fromOpaque(raw).takeUnretainedValue() }
            let slot = Slot()
            pthread_setspecific(key, Unmanaged.passRetained(slot).toOpaque())
            return slot
        }
    }
}
