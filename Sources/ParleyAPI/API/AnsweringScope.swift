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

    /// The request being answered on this thread (a task-local, bound by the request pipeline around the handler);
    /// nil outside a handler, e.g. on the message writer's thread.
    @TaskLocal package static var current: AnsweringScope?
}
