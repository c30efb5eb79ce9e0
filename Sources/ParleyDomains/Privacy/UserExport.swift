import ParleyAPI
import ParleyCore
import ParleyPostgres

/// A user's data export (docs/privacy.md#user-data-export): the `user_export` job kind, whose result is one ZIP file
/// (``UserExportArchive``) with everything Parley keeps about the user.
///
/// The archive is a ``JobFile``: each step appends whole entries to it in the step's transaction and keeps the list of
/// entries in its checkpoint, so a node that dies mid-way leaves the archive as the last committed step left it and the
/// node that resumes it writes the same bytes from there. The phases, in order: the small sections in one step
/// (profile, devices, friends, blacklist, groups); the messages the user sent, ``messagesPerStep`` per entry; its
/// reactions and read receipts, ``rowsPerStep`` per entry; its files (their bytes, within the limits below, and an index
/// of all of them); then the step that writes `README.txt` and the central directory and records the file.
package enum UserExport {
    /// The job kind's name.
    package static let kindName = "user_export"
    static let fileName = "user-export.zip"
    static let mimeType = "application/zip"

    /// Messages per step (and per `messages/NNNNNN.jsonl` entry).
    static let messagesPerStep = 2_000
    /// Reactions or receipts per step (and per entry).
    static let rowsPerStep = 10_000
    /// Files listed per page of the file walk.
    static let filesPerPage = 100
    /// A file larger than this is listed in the index (`included: false`) but its bytes are not copied: it stays
    /// downloadable through the files routes.
    static let maxFileBytes: Int64 = 16 * 1024 * 1024
    /// A step stops copying files once it copied this many bytes.
    static let stepFileBytes: Int64 = 8 * 1024 * 1024
    /// Files are copied while the archive stays under this; later ones are listed only.
    static let maxArchiveBytes: Int64 = 256 * 1024 * 1024
    /// Files are copied while the archive has fewer entries than this (plain ZIP holds 65,535).
    static let maxEntries = 60_000

    enum Phase: String {
        case profile, messages, reactions, receipts, files, finish
    }

    /// Where the next step resumes.
    struct Checkpoint {
        var phase: Phase
        var file: JobFile
        var entries: [UserExportArchive.Entry]
        /// When the export was requested: the entries' modification time.
        var requestedAt: Int64
        /// The app's settings the steps need (its storage quota, its group limits), as they were when it was requested.
        var settings: JSONObject
        /// Entries written in the current phase (each names its entry `NNNNNN`).
        var part: Int64
        /// Where the current phase's walk stands (empty: at its start).
        var cursor: [JSONValue]
        /// What the archive holds so far, for the result and README.txt.
        var counts: JSONObject

        var json: JSONObject {
            [
                "phase": .string(phase.rawValue), "file": .object(file.json), "entries": .array(entries.map(\.json)),
                "requested_at": .int(requestedAt), "settings": .object(settings), "part": .int(part), "cursor": .array(cursor),
                "counts": .object(counts),
            ]
        }

        init(file: JobFile, requestedAt: Int64, settings: JSONObject) {
            phase = .profile
            self.file = file
            entries = []
            self.requestedAt = requestedAt
            self.settings = settings
            part = 0
            cursor = []
            counts = [:]
        }

        init(_ json: JSONObject) throws {
            guard let phase = json["phase"]?.stringValue.flatMap(Phase.init(rawValue:)), let entries = json["entries"]?.arrayValue,
                let requestedAt = json["requested_at"]?.intValue, let settings = json["settings"]?.objectValue,
                let part = json["part"]?.intValue, let cursor = json["cursor"]?.arrayValue, let counts = json["counts"]?.objectValue
            else { throw APIError(.internalError, "malformed user_export checkpoint") }
            self.phase = phase
            file = try JobFile(json["file"])
            self.entries = try entries.map { json in
                guard let entry = UserExportArchive.Entry(json) else { throw APIError(.internalError, "malformed user_export entry") }
                return entry
            }
            self.requestedAt = requestedAt
            self.settings = settings
            self.part = part
            self.cursor = cursor
            self.counts = counts
        }

        func count(_ name: String) -> Int64 { counts[name]?.intValue ?? 0 }

        mutating func add(_ amount: Int, to name: String) { counts[name] = .int(count(name) + Int64(amount)) }

        /// Appends the entry `name` with `data` to the archive.
        mutating func write(_ name: String, _ data: [UInt8], appID: String, now: Int64, on db: PostgresConnection) throws {
            let (bytes, entry) = UserExportArchive.entry(name, data, at: file.size, modified: requestedAt)
            try file.append(bytes, appID: appID, now: now, on: db)
            entries.append(entry)
        }

        /// The next entry name of the current phase: `stem` then `NNNNNN.jsonl`.
        mutating func nextPart(_ stem: String) -> String {
            part += 1
            let digits = String(part)
            return "\(stem)\(String(repeating: "0", count: max(0, 6 - digits.count)))\(digits).jsonl"
        }

        /// Moves to `phase`, its walk at the start.
        mutating func enter(_ phase: Phase) {
            self.phase = phase
            part = 0
            cursor = []
        }
    }

    /// The job kind; `services` reads the bytes of files kept in an object store.
    package static func kind(services: Services) -> JobKind {
        JobKind(
            name: kindName,
            plan: { params, settings, context in
                guard let userID = params["user_id"]?.stringValue else { throw APIError(.internalError, "malformed user_export parameters") }
                try UserService(db: context.db, appID: context.appID, now: context.now).requireExists(userID)
                let total = try MessageBulkRemovalStore.count(appID: context.appID, sent(by: userID), on: context.db)
                let file = try JobFile.start(appID: context.appID, now: context.now, on: context.db)
                var kept: JSONObject = [:]
                for name in ["app_storage_quota_bytes", "max_group_members", "big_group_threshold", "application_expiry_s"] {
                    kept[name] = .int(settings.int(name))
                }
                return JobPlan(total: total, checkpoint: Checkpoint(file: file, requestedAt: context.now, settings: kept).json)
            },
            step: { params, json, context in
                guard let userID = params["user_id"]?.stringValue else { throw APIError(.internalError, "malformed user_export parameters") }
                var checkpoint = try Checkpoint(json)
                let transfer = FileTransfer(services: services, appID: context.appID)
                return try step(userID, &checkpoint, context, transfer: transfer)
            })
    }

    /// The messages an export holds: every message the user sent but those deleted for everyone (tombstones, with no
    /// content left) and group tips (notices that name their operator as sender) — the selection of a bulk removal.
    static func sent(by userID: String) -> MessageBulkRemovalStore.Selection {
        MessageBulkRemovalStore.Selection(userID: userID, from: .min, to: .max)
    }

    /// One step of the current phase.
    static func step(_ userID: String, _ checkpoint: inout Checkpoint, _ context: JobKind.Context, transfer: FileTransfer) throws
        -> JobStepOutcome
    {
        let (db, appID, now) = (context.db, context.appID, context.now)
        var progress = 0
        switch checkpoint.phase {
        case .profile:
            try writeProfile(userID, &checkpoint, context)
            checkpoint.enter(.messages)
        case .messages:
            let after = (checkpoint.cursor.first?.intValue ?? .min, checkpoint.cursor.last?.stringValue ?? "")
            let batch = try MessageBulkRemovalStore.next(appID: appID, sent(by: userID), after: after, limit: messagesPerStep, on: db)
            if !batch.isEmpty {
                let messages = Dictionary(
                    try MessageStore.fetchMany(appID: appID, messageIDs: batch.map(\.messageID), on: db).map { ($0.messageID, $0) },
                    uniquingKeysWith: { first, _ in first })
                var lines: [UInt8] = []
                for sent in batch {
                    guard let message = messages[sent.messageID] else { continue }
                    var w = JSONWriter(capacity: 1024)
                    message.write(to: &w, .app)
                    lines += w.bytes
                    lines.append(0x0A)
                }
                try checkpoint.write(checkpoint.nextPart("messages/"), lines, appID: appID, now: now, on: db)
                checkpoint.add(batch.count, to: "messages")
                progress = batch.count
            }
            if let last = batch.last { checkpoint.cursor = [.int(last.timestamp), .string(last.messageID)] }
            if batch.count < messagesPerStep { checkpoint.enter(.reactions) }
        case .reactions:
            let after = (checkpoint.cursor.first?.stringValue ?? "", checkpoint.cursor.last?.stringValue ?? "")
            let rows = try UserExportStore.reactions(appID: appID, userID: userID, after: after, limit: rowsPerStep, on: db)
            try checkpoint.writeLines(
                "reactions",
                rows.map { ["message_id": .string($0.messageID), "reaction_type": .string($0.reactionType), "reacted_at": .int($0.reactedAt)] },
                appID: appID, now: now, on: db)
            if let last = rows.last { checkpoint.cursor = [.string(last.messageID), .string(last.reactionType)] }
            if rows.count < rowsPerStep { checkpoint.enter(.receipts) }
        case .receipts:
            let rows = try UserExportStore.receipts(
                appID: appID, userID: userID, after: checkpoint.cursor.first?.stringValue ?? "", limit: rowsPerStep, on: db)
            try checkpoint.writeLines(
                "receipts", rows.map { ["message_id": .string($0.messageID), "read_at": .int($0.readAt)] }, appID: appID, now: now, on: db)
            if let last = rows.last { checkpoint.cursor = [.string(last.messageID)] }
            if rows.count < rowsPerStep { checkpoint.enter(.files) }
        case .files:
            try copyFiles(userID, &checkpoint, context, transfer: transfer)
        case .finish:
            return .finished(try finish(userID, &checkpoint, context), progress: 0)
        }
        return .next(checkpoint.json, progress: Int64(progress))
    }

    /// `profile.json` (the User), `devices.json`, `friends.json`, `blacklist.json` and `groups.json` (each
    /// `{items: [...]}`, in the order of its list route), in one step: each list is bounded by the app's limits.
    static func writeProfile(_ userID: String, _ checkpoint: inout Checkpoint, _ context: JobKind.Context) throws {
        let (db, appID, now) = (context.db, context.appID, context.now)
        guard let user = try UserStore.fetch(appID: appID, userID: userID, on: db) else {
            throw APIError(.userNotFound, "user \(userID) does not exist")
        }
        try checkpoint.write("profile.json", user.json(.app), appID: appID, now: now, on: db)
        try checkpoint.write(
            "devices.json", items(try DeviceStore.list(appID: appID, userID: userID, on: db).map { $0.json() }), appID: appID, now: now, on: db)

        var friends: [[UInt8]] = []
        var afterFriend: (createdAt: Int64, userID: String)? = nil
        while true {
            let page = try FriendStore.list(
                appID: appID, owner: userID, keywords: [], matchAlias: false, after: afterFriend, limit: 1_000, on: db)
            friends += page.map(\.json)
            guard page.count == 1_000, let last = page.last else { break }
            afterFriend = (last.createdAt, last.userID)
        }
        try checkpoint.write("friends.json", items(friends), appID: appID, now: now, on: db)

        var blocked: [[UInt8]] = []
        var afterBlocked: (createdAt: Int64, userID: String)? = nil
        while true {
            let page = try BlacklistStore.list(appID: appID, owner: userID, after: afterBlocked, limit: 1_000, on: db)
            blocked += page.map(\.json)
            guard page.count == 1_000, let last = page.last else { break }
            afterBlocked = (last.createdAt, last.userID)
        }
        try checkpoint.write("blacklist.json", items(blocked), appID: appID, now: now, on: db)

        let limits = GroupLimits(AppSettings.stored(checkpoint.settings))
        var groups: [[UInt8]] = []
        var afterGroup: (joinedAt: Int64, groupID: String)? = nil
        while true {
            let page = try GroupStore.userGroups(appID: appID, userID: userID, keywords: [], after: afterGroup, limit: 1_000, on: db)
            groups += page.map { $0.json(limits, now: now) }
            guard page.count == 1_000, let last = page.last else { break }
            afterGroup = (last.joinedAt, last.group.groupID)
        }
        try checkpoint.write("groups.json", items(groups), appID: appID, now: now, on: db)
        checkpoint.add(friends.count, to: "friends")
        checkpoint.add(blocked.count, to: "blacklist")
        checkpoint.add(groups.count, to: "groups")
    }

    /// `{"items":[...]}` of rendered objects.
    static func items(_ objects: [[UInt8]]) -> [UInt8] {
        var w = JSONWriter(capacity: 64 + objects.reduce(0) { $0 + $1.count + 1 })
        w.object { w in
            w.key("items")
            w.array { w in for object in objects { w.writeRaw(object) } }
        }
        return w.bytes
    }

    /// The user's files, newest first, but for the archives of its earlier exports: each step lists a page of them in `files/index-NNNNNN.jsonl` (the file's
    /// metadata, whether its bytes are in the archive, and where) and copies the bytes of those within the limits to
    /// `files/<file_id>/<file name>`, stopping early once it copied ``stepFileBytes``.
    static func copyFiles(_ userID: String, _ checkpoint: inout Checkpoint, _ context: JobKind.Context, transfer: FileTransfer) throws {
        let (db, appID, now) = (context.db, context.appID, context.now)
        let after =
            checkpoint.cursor.count == 2 ? checkpoint.cursor[0].intValue.flatMap { t in checkpoint.cursor[1].stringValue.map { (t, $0) } } : nil
        let page = try FileStore.list(appID: appID, ownerID: userID, kind: nil, after: after, limit: filesPerPage, on: db)
        let earlier = try UserExportStore.earlierArchives(appID: appID, userID: userID, kind: kindName, on: db)
        var index: [UInt8] = []
        var copied: Int64 = 0
        var done = 0
        for file in page {
            done += 1
            checkpoint.cursor = [.int(file.createdAt), .string(file.fileID)]
            if earlier.contains(file.fileID) { continue }
            let stored = file.variants[.original]?.size ?? file.size
            var path: String? = nil
            if stored <= maxFileBytes, checkpoint.file.size + stored < maxArchiveBytes, checkpoint.entries.count < maxEntries {
                let name = "files/\(file.fileID)/\(safeName(file.fileName))"
                try checkpoint.write(name, try transfer.originalBytes(of: file, on: db), appID: appID, now: now, on: db)
                path = name
                copied += stored
                checkpoint.add(1, to: "files_included")
            }
            var o = JSONObjectWriter(capacity: 256)
            o["file_id"] = file.fileID
            o["kind"] = file.kind.rawValue
            o["file_name"] = file.fileName
            o["mime_type"] = file.mimeType
            o["file_size"] = file.size
            o["sha256"] = file.sha256
            o["created_at"] = file.createdAt
            o["included"] = path != nil
            o["path"] = path
            index += o.finish()
            index.append(0x0A)
            checkpoint.add(1, to: "files")
            if copied >= stepFileBytes { break }
        }
        if !index.isEmpty { try checkpoint.write(checkpoint.nextPart("files/index-"), index, appID: appID, now: now, on: db) }
        if done == page.count && page.count < filesPerPage { checkpoint.phase = .finish }
    }

    /// A file's name as an archive path segment: no separators, no control characters, never `.` or `..`.
    static func safeName(_ name: String) -> String {
        let cleaned = String(name.unicodeScalars.map { $0 == "/" || $0 == "\\" || $0.value < 0x20 || $0.value == 0x7F ? "_" : Character($0) })
        return cleaned.isEmpty || cleaned == "." || cleaned == ".." ? "_" : cleaned
    }

    /// The last step: `README.txt`, the central directory, and the archive recorded as a file owned by the user.
    /// Returns the job's result `{file_id, file_size, mime_type, counts}`.
    static func finish(_ userID: String, _ checkpoint: inout Checkpoint, _ context: JobKind.Context) throws -> JSONObject {
        let (db, appID, now) = (context.db, context.appID, context.now)
        let readme = """
            The data Parley keeps about user \(userID) (app \(appID)), exported at \(checkpoint.requestedAt) (ms since 1970, UTC).

            profile.json            the user
            devices.json            its push devices
            friends.json            its friend list
            blacklist.json          its blacklist
            groups.json             the groups it is a member of
            messages/*.jsonl        every message it sent (one Message per line, oldest first), \(checkpoint.count("messages")) in all;
                                    messages deleted for everyone and group notices are not included
            reactions/*.jsonl       its reactions, \(checkpoint.count("reactions")) in all
            receipts/*.jsonl        the messages it marked read, \(checkpoint.count("receipts")) in all
            files/index-*.jsonl     every file it uploaded (\(checkpoint.count("files")) in all); "included" tells whether its bytes are here,
                                    at "path" (\(checkpoint.count("files_included")) are); the others stay downloadable by file_id

            """
        try checkpoint.write("README.txt", Array(readme.utf8), appID: appID, now: now, on: db)
        let directory = UserExportArchive.directory(checkpoint.entries, at: checkpoint.file.size, modified: checkpoint.requestedAt)
        try checkpoint.file.append(directory, appID: appID, now: now, on: db)
        let file = try checkpoint.file.finish(
            appID: appID, now: now, kind: .file, fileName: fileName, mimeType: mimeType, ownerID: userID,
            quotaBytes: checkpoint.settings["app_storage_quota_bytes"]?.intValue ?? 0, on: db)
        return [
            "file_id": .string(file.fileID), "file_size": .int(file.size), "mime_type": .string(file.mimeType), "counts": .object(checkpoint.counts),
        ]
    }
}

extension UserExport.Checkpoint {
    /// One entry `prefix/NNNNNN.jsonl` of `rows` (none when empty), counted under `prefix`.
    mutating func writeLines(_ prefix: String, _ rows: [JSONObject], appID: String, now: Int64, on db: PostgresConnection) throws {
        guard !rows.isEmpty else { return }
        var lines: [UInt8] = []
        for row in rows {
            lines += JSONValue.object(row).serialized()
            lines.append(0x0A)
        }
        try write(nextPart(prefix + "/"), lines, appID: appID, now: now, on: db)
        add(rows.count, to: prefix)
    }
}
