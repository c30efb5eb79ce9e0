import Glibc

/// Files Parley keeps in its data directory (the embedded cluster lives in its `pg/` subdirectory).
package enum DataDirectory {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Creates the directory (mode 0711: the embedded cluster may run as another user and must traverse it) if it does not exist.
    package static func prepare(_ path: String) throws {
        var components: [String] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: false) {
            components.append(String(part))
            let prefix = components.joined(separator: "/")
            if prefix.isEmpty || prefix == "." { continue }
            if mkdir(prefix, 0o711) != 0 && errno != EEXIST {
                throw Failure(description: "cannot create data directory \(prefix): \(String(cString: strerror(errno)))")
            }
        }
    }

    /// The admin key: the configured one, else the one saved in `admin_key`, else a new one saved there (0600).
    /// Returns the key and whether it was generated now (so it can be printed once).
    package static func adminKey(configured: String?, in directory: String) throws -> (String, Bool) {
        if let configured { return (configured, false) }
        if let saved = savedAdminKey(in: directory) { return (saved, false) }
        let key = "sk_" + Crypto.base64URLEncode(Crypto.randomBytes(32))
        try writeFile(adminKeyPath(in: directory), key + "\n", mode: 0o600)
        return (key, true)
    }

    /// The admin key saved in the data directory, nil when there is none.
    package static func savedAdminKey(in directory: String) -> String? {
        guard let saved = readFile(adminKeyPath(in: directory))?.trimmingWhitespace(), !saved.isEmpty else { return nil }
        return saved
    }

    package static func adminKeyPath(in directory: String) -> String { directory + "/admin_key" }

    package static func readFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func writeFile(_ path: String, _ text: String, mode: mode_t) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw Failure(description: "cannot write \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        fchmod(fd, mode)
        let bytes = Array(text.utf8)
        guard write(fd, bytes, bytes.count) == bytes.count else {
            throw Failure(description: "cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }
}

extension String {
    func trimmingWhitespace() -> String {
        var s = Substring(self)
        while let c = s.first, c.isWhitespace { s.removeFirst() }
        while let c = s.last, c.isWhitespace { s.removeLast() }
        return String(s)
    }
}
