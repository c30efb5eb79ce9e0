import Glibc

/// Per-route settings the server applies before the handler runs.
public struct RouteOptions: Sendable {
    /// Largest request body accepted for this route (413 beyond it); nil = the server default (1 MiB).
    public var maxBodyBytes: Int?
    /// The handler never blocks, so it may run on the event loop itself (no hand-off to a worker).
    public var runsOnEventLoop: Bool
    /// Stable name of the operation (the OpenAPI `operationId`).
    public var operationID: String?
    /// Runs the handler instead of the server's executor (a probe that must not queue behind busy handlers).
    public var executor: (any RequestExecutor)?
    /// The handler answers a body over `maxBodyBytes` itself: the request reaches it with `bodyOverLimit` set and
    /// no body, so 413 can come after the checks its API orders first (Parley: credentials, `Idempotency-Key`
    /// replay, 415; docs/errors.md#problems-rfc-9457). Otherwise the server answers 413 without calling it.
    public var answersOversizedBody: Bool
    /// The handler starts when the head arrives and reads the body as it comes (`Request.bodyStream`), so an upload
    /// of any size up to `maxBodyBytes` passes through in bounded memory. A declared `Content-Length` over the limit is
    /// still answered (or flagged, with `answersOversizedBody`) before the handler runs.
    public var streamsBody: Bool

    public init(
        maxBodyBytes: Int? = nil, runsOnEventLoop: Bool = false, operationID: String? = nil,
        executor: (any RequestExecutor)? = nil, answersOversizedBody: Bool = false, streamsBody: Bool = false
    ) {
        precondition(!(streamsBody && runsOnEventLoop), "a handler that reads a streamed body blocks: it cannot run on the loop")
        self.maxBodyBytes = maxBodyBytes
        self.runsOnEventLoop = runsOnEventLoop
        self.operationID = operationID
        self.executor = executor
        self.answersOversizedBody = answersOversizedBody
        self.streamsBody = streamsBody
    }
}

/// A request handler. It runs on a worker thread (or on the loop for `runsOnEventLoop` routes) and may block.
public typealias HTTPHandler = @Sendable (Request) throws -> Response

/// One registered route: method, path template (`/v1/users/{user_id}`), options and handler.
///
/// A class: a request carries its route from the head to the log line, and a reference is one retain where the
/// fields would be six. Immutable.
public final class Route: Sendable {
    public let method: HTTPMethod
    public let template: String
    public let options: RouteOptions
    public let handler: HTTPHandler
    /// Its position in `Router.routes` (registration order): a key per-route counters can use without hashing the
    /// template.
    public let index: Int
    let segments: [Segment]

    enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
    }

    init(method: HTTPMethod, template: String, options: RouteOptions, handler: @escaping HTTPHandler, index: Int, segments: [Segment]) {
        self.method = method
        self.template = template
        self.options = options
        self.handler = handler
        self.index = index
        self.segments = segments
    }
}

/// Collects routes at start-up; `build()` freezes them into an immutable `Router`.
public struct RouterBuilder: Sendable {
    private var routes: [Route] = []

    public init() {}

    /// Adds a route. A template is `/`-separated literals and `{name}` parameters, exactly as OpenAPI writes it.
    /// Literal segments are unreserved characters only (RFC 3986, section 2.3), which the router's canonical form
    /// relies on (``Router/match(method:path:)``).
    public mutating func add(
        _ method: HTTPMethod, _ template: String, options: RouteOptions = RouteOptions(),
        _ handler: @escaping HTTPHandler
    ) {
        let segments = template.split(separator: "/", omittingEmptySubsequences: true).map { part -> Route.Segment in
            if part.hasPrefix("{") && part.hasSuffix("}") { return .parameter(String(part.dropFirst().dropLast())) }
            precondition(part.utf8.allSatisfy(PercentDecoding.isUnreserved), "route literal \(part) must be unreserved characters: \(template)")
            return .literal(String(part))
        }
        precondition(template.hasPrefix("/"), "route template must start with /: \(template)")
        precondition(
            !routes.contains { $0.method == method && $0.segments.shapeEquals(segments) },
            "duplicate route \(method) \(template)")
        routes.append(
            Route(method: method, template: template, options: options, handler: handler, index: routes.count, segments: segments))
    }

    public func build() -> Router { Router(routes: routes) }
}

extension [Route.Segment] {
    fileprivate func shapeEquals(_ other: [Route.Segment]) -> Bool {
        guard count == other.count else { return false }
        for (a, b) in zip(self, other) {
            switch (a, b) {
            case (.literal(let x), .literal(let y)) where x == y: continue
            case (.parameter, .parameter): continue
            default: return false
            }
        }
        return true
    }
}

/// The frozen route table: matches a method and path to a route and its decoded path parameters.
public struct Router: Sendable {
    /// The outcome of matching a request.
    public enum Match: Sendable {
        case found(Route, parameters: [String: String])
        /// The path exists but not for this method; `allow` lists the methods that do.
        case methodNotAllowed(allow: [HTTPMethod])
        case notFound
        /// A path segment had a malformed percent-encoding.
        case badPath
    }

    private final class Node: Sendable {
        /// Literal children with their names' bytes: a node has few, so a scan by length and bytes beats hashing.
        let literals: [(name: [UInt8], node: Node)]
        let parameter: Node?
        /// The routes that end here, at most one per method.
        let routes: [Route]
        init(literals: [(name: [UInt8], node: Node)], parameter: Node?, routes: [Route]) {
            self.literals = literals
            self.parameter = parameter
            self.routes = routes
        }

        /// The route for `method`; HEAD falls back to the GET route.
        func route(for method: HTTPMethod) -> Route? {
            for route in routes where route.method == method { return route }
            if method == .head { for route in routes where route.method == .get { return route } }
            return nil
        }

        func literal(_ segment: UnsafeBufferPointer<UInt8>) -> Node? {
            for (name, node) in literals where name.count == segment.count {
                if name.withUnsafeBufferPointer({ memcmp($0.baseAddress!, segment.baseAddress!, segment.count) == 0 }) { return node }
            }
            return nil
        }
    }

    /// Every route, in registration order (for the OpenAPI contract check and `parley routes`).
    public let routes: [Route]
    private let root: Node
    /// Routes without parameters by the byte length of their path, then their exact path bytes, then (a short scan)
    /// their method: `/healthz` needs no segment walk and no hashing.
    private let staticRoutes: [[(path: [UInt8], routes: [Route])]]

    init(routes: [Route]) {
        self.routes = routes
        root = Self.buildNode(routes.map { ($0, $0.segments[...]) })
        var statics: [String: [Route]] = [:]
        for route in routes where !route.segments.contains(where: { if case .parameter = $0 { true } else { false } }) {
            statics["/" + route.segments.map { if case .literal(let s) = $0 { s } else { "" } }.joined(separator: "/"), default: []]
                .append(route)
        }
        var byLength: [[(path: [UInt8], routes: [Route])]] = []
        for (path, routes) in statics {
            let bytes = Array(path.utf8)
            while byLength.count <= bytes.count { byLength.append([]) }
            byLength[bytes.count].append((bytes, routes))
        }
        staticRoutes = byLength
    }

    /// The parameterless routes of exactly this path.
    private func staticCandidates(_ path: Substring) -> [Route]? {
        let length = path.utf8.count
        guard length > 0, length < staticRoutes.count else { return nil }
        let entries = staticRoutes[length]
        if entries.isEmpty { return nil }
        // Through the base string: `Substring.UTF8View`'s own contiguous access is generic (~500 instructions).
        let base = path.base.utf8
        let offset = base.distance(from: base.startIndex, to: path.startIndex)
        let found = base.withContiguousStorageIfAvailable { raw -> [Route]? in
            let bytes = raw.baseAddress! + offset
            for entry in entries where entry.path.withUnsafeBufferPointer({ memcmp($0.baseAddress!, bytes, length) == 0 }) {
                return entry.routes
            }
            return nil
        }
        if let found { return found }
        return entries.first { path.utf8.elementsEqual($0.path) }?.routes
    }

    private static func buildNode(_ entries: [(Route, ArraySlice<Route.Segment>)]) -> Node {
        var here: [Route] = []
        var literalGroups: [String: [(Route, ArraySlice<Route.Segment>)]] = [:]
        var parameterGroup: [(Route, ArraySlice<Route.Segment>)] = []
        for (route, rest) in entries {
            guard let first = rest.first else {
                here.removeAll { $0.method == route.method }
                here.append(route)
                continue
            }
            switch first {
            case .literal(let name): literalGroups[name, default: []].append((route, rest.dropFirst()))
            case .parameter: parameterGroup.append((route, rest.dropFirst()))
            }
        }
        return Node(
            literals: literalGroups.sorted { $0.key < $1.key }.map { (Array($0.key.utf8), buildNode($0.value)) },
            parameter: parameterGroup.isEmpty ? nil : buildNode(parameterGroup),
            routes: here)
    }

    /// Matches `method` and the raw (still percent-encoded) `path`. Literal segments win over parameters;
    /// when the literal branch has no route for the method, the parameter branch is tried.
    ///
    /// One canonical form of a path reaches a route, so that a proxy rule on `/v1/apps` cannot be bypassed by
    /// another spelling of it:
    /// - Each segment is percent-decoded before it is compared. Literals are unreserved characters only (checked by
    ///   `RouterBuilder.add`), so a literal matches exactly the spellings RFC 3986, section 6.2.2.2 calls equivalent,
    ///   the ones a normalising proxy (nginx) also takes for it: `/%76%31/apps` is `/v1/apps`; `%2F` never matches
    ///   a literal and stays inside a parameter (`/v1/users/a%2Fb` is user `a/b`).
    /// - An empty segment matches nothing: `//v1//apps` and `/v1/apps/` are 404, not `/v1/apps` (a proxy that does
    ///   not merge slashes would not see `/v1/apps` in them).
    /// - Dot segments are not resolved: `.` and `..` are values like any other (a user id may be `..`), so
    ///   `/v1/x/../apps` reaches no route here even where a proxy resolves it to `/v1/apps`.
    public func match(method: HTTPMethod, path: Substring) -> Match {
        // Fast path: an exact parameterless route for this method (a literal beats any parameter route).
        if let candidates = staticCandidates(path) {
            for route in candidates where route.method == method { return .found(route, parameters: [:]) }
            if method == .head {
                for route in candidates where route.method == .get { return .found(route, parameters: [:]) }
            }
        }
        guard path.utf8.first == UInt8(ascii: "/") else { return .notFound }
        // On the path's bytes, through the base string (`Substring.UTF8View`'s own contiguous access is generic).
        let base = path.base.utf8
        let offset = base.distance(from: base.startIndex, to: path.startIndex)
        let count = path.utf8.count
        let matched = base.withContiguousStorageIfAvailable { raw in
            match(method: method, bytes: UnsafeBufferPointer(rebasing: raw[offset..<offset + count]))
        }
        return matched ?? Array(path.utf8).withUnsafeBufferPointer { match(method: method, bytes: $0) }
    }

    /// `match(method:path:)` on the bytes of a path that starts with `/`: splits it into segments (byte ranges),
    /// percent-decoding them into a copy only when one holds a `%`, then walks the tree.
    private func match(method: HTTPMethod, bytes path: UnsafeBufferPointer<UInt8>) -> Match {
        var segments: [Range<Int>] = []
        segments.reserveCapacity(8)
        // Set at the first segment with a `%`: the path up to it, then every segment from it on, decoded.
        var decoded: [UInt8]?
        var start = 1
        while true {
            var end = start
            while end < path.count && path[end] != UInt8(ascii: "/") { end += 1 }
            guard end > start else { return .notFound }  // an empty segment matches nothing
            let raw = UnsafeBufferPointer(rebasing: path[start..<end])
            if decoded == nil && raw.contains(UInt8(ascii: "%")) { decoded = Array(path[0..<start]) }
            if decoded != nil {
                let from = decoded!.count
                guard PercentDecoding.decode(raw, into: &decoded!) else { return .badPath }
                segments.append(from..<decoded!.count)
            } else {
                segments.append(start..<end)
            }
            if end == path.count { break }
            start = end + 1
        }
        if let decoded { return decoded.withUnsafeBufferPointer { walk(method: method, bytes: $0, segments: segments) } }
        return walk(method: method, bytes: path, segments: segments)
    }

    private func walk(method: HTTPMethod, bytes: UnsafeBufferPointer<UInt8>, segments: [Range<Int>]) -> Match {
        var values: [Range<Int>] = []
        values.reserveCapacity(segments.count)
        if let route = find(method, from: root, at: 0, bytes, segments, values: &values) {
            var parameters: [String: String] = Dictionary(minimumCapacity: values.count)
            var index = 0
            for segment in route.segments {
                if case .parameter(let name) = segment {
                    parameters[name] = String(decoding: UnsafeBufferPointer(rebasing: bytes[values[index]]), as: UTF8.self)
                    index += 1
                }
            }
            return .found(route, parameters: parameters)
        }
        var allow = Set<String>()
        reachable(from: root, at: 0, bytes, segments) { node in for route in node.routes { allow.insert(route.method.rawValue) } }
        if allow.isEmpty { return .notFound }
        if allow.contains("GET") { allow.insert("HEAD") }
        allow.insert("OPTIONS")
        return .methodNotAllowed(allow: allow.sorted().map { HTTPMethod(rawValue: $0) })
    }

    /// The first route for `method` at a node the segments from `index` reach, literals tried before the
    /// parameter at each level; `values` gets the ranges of the parameters on its way (pushed and popped in place).
    private func find(
        _ method: HTTPMethod, from node: Node, at index: Int, _ bytes: UnsafeBufferPointer<UInt8>, _ segments: [Range<Int>],
        values: inout [Range<Int>]
    ) -> Route? {
        guard index < segments.count else { return node.route(for: method) }
        let segment = segments[index]
        if let next = node.literal(UnsafeBufferPointer(rebasing: bytes[segment])),
            let route = find(method, from: next, at: index + 1, bytes, segments, values: &values)
        {
            return route
        }
        if let next = node.parameter {
            values.append(segment)
            if let route = find(method, from: next, at: index + 1, bytes, segments, values: &values) { return route }
            values.removeLast()
        }
        return nil
    }

    /// Calls `body` with every node with routes that the segments from `index` reach.
    private func reachable(
        from node: Node, at index: Int, _ bytes: UnsafeBufferPointer<UInt8>, _ segments: [Range<Int>], _ body: (Node) -> Void
    ) {
        guard index < segments.count else {
            if !node.routes.isEmpty { body(node) }
            return
        }
        if let next = node.literal(UnsafeBufferPointer(rebasing: bytes[segments[index]])) {
            reachable(from: next, at: index + 1, bytes, segments, body)
        }
        if let next = node.parameter { reachable(from: next, at: index + 1, bytes, segments, body) }
    }
}

/// Percent-decoding of URL path segments and query components (RFC 3986).
public enum PercentDecoding {
    /// Decodes `%XX` escapes (and `+` as space when `plusAsSpace`); nil for a malformed escape or invalid UTF-8.
    public static func decode(_ input: Substring, plusAsSpace: Bool = false) -> String? {
        let utf8 = input.utf8
        if !utf8.contains(UInt8(ascii: "%")) && !(plusAsSpace && utf8.contains(UInt8(ascii: "+"))) {
            return String(input)
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count)
        var i = utf8.startIndex
        while i != utf8.endIndex {
            let c = utf8[i]
            if c == UInt8(ascii: "%") {
                let h1 = utf8.index(after: i)
                guard h1 != utf8.endIndex else { return nil }
                let h2 = utf8.index(after: h1)
                guard h2 != utf8.endIndex, let hi = hexValue(utf8[h1]), let lo = hexValue(utf8[h2]) else { return nil }
                bytes.append(hi << 4 | lo)
                i = utf8.index(after: h2)
            } else {
                bytes.append(plusAsSpace && c == UInt8(ascii: "+") ? UInt8(ascii: " ") : c)
                i = utf8.index(after: i)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    /// Appends the percent-decoded `input` (a path segment: `+` stays) to `output`; false for a malformed escape
    /// or a result that is not UTF-8.
    static func decode(_ input: UnsafeBufferPointer<UInt8>, into output: inout [UInt8]) -> Bool {
        let start = output.count
        var i = 0
        while i < input.count {
            let c = input[i]
            if c == UInt8(ascii: "%") {
                guard i + 2 < input.count, let hi = hexValue(input[i + 1]), let lo = hexValue(input[i + 2]) else { return false }
                output.append(hi << 4 | lo)
                i += 3
            } else {
                output.append(c)
                i += 1
            }
        }
        return output[start...].withUnsafeBufferPointer { String(validating: $0, as: UTF8.self) != nil }
    }

    /// Decodes one query component (`+` is a space).
    public static func decodeQuery(_ input: Substring) -> String? { decode(input, plusAsSpace: true) }

    /// Splits a raw query string into decoded (name, value) pairs in order; nil when any part is malformed.
    public static func parseQuery(_ query: Substring) -> [(String, String)]? {
        var result: [(String, String)] = []
        for part in query.split(separator: "&", omittingEmptySubsequences: true) {
            let name: Substring
            let value: Substring
            if let eq = part.firstIndex(of: "=") {
                name = part[..<eq]
                value = part[part.index(after: eq)...]
            } else {
                name = part
                value = ""
            }
            guard let n = decode(name, plusAsSpace: true), let v = decode(value, plusAsSpace: true) else { return nil }
            result.append((n, v))
        }
        return result
    }

    /// Whether `c` is an unreserved character of RFC 3986, section 2.3: `A-Z a-z 0-9 - . _ ~`.
    public static func isUnreserved(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"): true
        default: false
        }
    }

    /// The value of one ASCII hex digit (either case), or nil.
    public static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
