import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Pure unit tests of message body validation (the body and length rules and the validation order of
/// docs/messages.md#sending).
@Suite("Message bodies: types, fields and length rules")
struct MessageBodyTests {
    // MARK: - Helpers

    private static func bytes(_ n: Int, _ c: Character = "a") -> JSONValue { .string(String(repeating: c, count: n)) }

    private static func base64(_ n: Int) -> JSONValue { .string(Crypto.base64Encode([UInt8](repeating: 7, count: n))) }

    private static let image: JSONValue = ["url": "https://cdn.example/p/1.png", "file_name": "1.png"]
    private static let file: JSONValue = ["url": "https://cdn.example/f/r.pdf", "file_name": "r.pdf"]
    private static let audio: JSONValue = ["url": "https://cdn.example/a.mp3", "file_name": "a.mp3", "duration_ms": 1200]
    private static let video: JSONValue = ["url": "https://cdn.example/v.mp4", "file_name": "v.mp4", "duration_ms": 5000]
    private static let custom: JSONValue = ["data": "{}", "sub_type": 7]

    private static func item(_ type: MessageType, _ body: JSONValue) -> JSONValue { ["type": .int(type.rawValue), "body": body] }

    private static func multiple(_ items: [JSONValue]) -> JSONValue { ["items": .array(items)] }

    /// `body` with member `key` set to `value`.
    private static func with(_ body: JSONValue, _ key: String, _ value: JSONValue) -> JSONValue {
        var object = body.objectValue ?? JSONObject()
        object[key] = value
        return .object(object)
    }

    private func result(_ type: Int64, _ body: JSONValue?, textMaxBytes: Int = 2048) -> Result<MessageBody, APIError> {
        do {
            return .success(try MessageBodyValidator.validate(type: type, body: body, textMaxBytes: textMaxBytes))
        } catch {
            return .failure(error)
        }
    }

    @discardableResult
    private func expectValid(
        _ type: MessageType, _ body: JSONValue, textMaxBytes: Int = 2048, sourceLocation: SourceLocation = #_sourceLocation
    ) -> MessageBody? {
        switch result(type.rawValue, body, textMaxBytes: textMaxBytes) {
        case .success(let b): return b
        case .failure(let e):
            Issue.record("expected a valid body, got \(e)", sourceLocation: sourceLocation)
            return nil
        }
    }

    /// Expects 400 `6000001` whose `errors[].field` are exactly `fields`.
    private func expectInvalid(
        _ type: Int64, _ body: JSONValue?, fields: [String], textMaxBytes: Int = 2048,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        switch result(type, body, textMaxBytes: textMaxBytes) {
        case .success: Issue.record("expected 400 naming \(fields), got a valid body", sourceLocation: sourceLocation)
        case .failure(let e):
            #expect(e.status == 400 && e.code.code == ErrorCode.invalidParams.code, "\(e)", sourceLocation: sourceLocation)
            #expect(e.fieldErrors.map(\.field) == fields, "\(e)", sourceLocation: sourceLocation)
        }
    }

    private func expectInvalid(
        _ type: MessageType, _ body: JSONValue?, field: String, textMaxBytes: Int = 2048,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        expectInvalid(type.rawValue, body, fields: [field], textMaxBytes: textMaxBytes, sourceLocation: sourceLocation)
    }

    /// Expects a non-400 problem with `status` and `code` whose detail names `path`.
    private func expectProblem(
        _ type: MessageType, _ body: JSONValue, _ status: Int, _ code: ErrorCode, path: String, textMaxBytes: Int = 2048,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        switch result(type.rawValue, body, textMaxBytes: textMaxBytes) {
        case .success: Issue.record("expected \(status) \(code) at \(path), got a valid body", sourceLocation: sourceLocation)
        case .failure(let e):
            #expect(e.status == status && e.code == code, "\(e)", sourceLocation: sourceLocation)
            #expect(e.detail.hasPrefix(path + " ") || e.detail.hasPrefix(path + ":"), "\(e)", sourceLocation: sourceLocation)
            #expect(e.fieldErrors.isEmpty, "\(e)", sourceLocation: sourceLocation)
        }
    }

    private func tooLarge(
        _ type: MessageType, _ body: JSONValue, path: String, textMaxBytes: Int = 2048,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        expectProblem(type, body, 413, .messageTooLarge, path: path, textMaxBytes: textMaxBytes, sourceLocation: sourceLocation)
    }

    // MARK: - Type and body shape

    @Test(arguments: [Int64(0), 30, 3, 99, 201, -1, 1_000_000])
    func unknownTypesAreInvalid(type: Int64) {
        expectInvalid(type, ["text": "hi"], fields: ["type"])
    }

    @Test(arguments: [MessageType.revoke, .tips])
    func serverProducedTypesAreInvalidInRequests(type: MessageType) {
        expectInvalid(type.rawValue, ["revoke_type": 0, "event": 1], fields: ["type"])
    }

    @Test func bodyMustBeAnObject() {
        expectInvalid(.text, nil, field: "body")
        expectInvalid(.text, .null, field: "body")
        expectInvalid(.text, "hi", field: "body")
        expectInvalid(.text, ["hi"], field: "body")
        expectInvalid(99, nil, fields: ["type", "body"])
    }

    @Test func everyTypeIsSendableExceptRevokeAndTips() {
        #expect(MessageType.allCases.filter { !$0.isSendable } == [.revoke, .tips])
        #expect(MessageType.allCases.filter(\.isAllowedInMultiple) == [.text, .image, .file, .audio, .video, .custom])
    }

    // MARK: - 1 text

    @Test func textHappyPathDropsUnknownKeys() {
        let body = expectValid(.text, ["text": "hello", "color": "red", "extra": ["x": 1]])
        #expect(body?.type == .text)
        #expect(body?.json == ["text": "hello"])
        #expect(body?.combineMessageIDs == [])
    }

    @Test(arguments: [64, 2048, 32768])
    func textLimitIsTextMaxBytes(limit: Int) {
        expectValid(.text, ["text": Self.bytes(limit)], textMaxBytes: limit)
        tooLarge(.text, ["text": Self.bytes(limit + 1)], path: "body.text", textMaxBytes: limit)
    }

    @Test func textLimitCountsUTF8Bytes() {
        // "é" is 2 bytes: 1024 of them are exactly 2048 bytes.
        expectValid(.text, ["text": Self.bytes(1024, "é")])
        tooLarge(.text, ["text": .string(String(repeating: "é", count: 1024) + "a")], path: "body.text")
        expectValid(.text, ["text": Self.bytes(512, "😀")])
        tooLarge(.text, ["text": Self.bytes(513, "😀")], path: "body.text")
    }

    @Test func emptyOrMissingTextIsInvalid() {
        expectInvalid(.text, ["text": ""], field: "body.text")
        expectInvalid(.text, [:], field: "body.text")
        expectInvalid(.text, ["text": 5], field: "body.text")
        expectInvalid(.text, ["text": .null], field: "body.text")
        expectValid(.text, ["text": "a"])
    }

    // MARK: - 2 command

    @Test func commandHappyPathCanonicalisesBase64() {
        let body = expectValid(.command, ["data": "AQID", "x": 1])
        #expect(body?.json == ["data": "AQID"])
        // Unpadded input is accepted and stored padded.
        #expect(expectValid(.command, ["data": "AQI"])?.json == ["data": "AQI="])
        #expect(expectValid(.command, ["data": "AQ"])?.json == ["data": "AQ=="])
        #expect(expectValid(.command, ["data": "AQ=="])?.json == ["data": "AQ=="])
    }

    @Test func commandDataDecodesToAtMost5120Bytes() {
        expectValid(.command, ["data": Self.base64(1)])
        expectValid(.command, ["data": Self.base64(5120)], textMaxBytes: 64)
        tooLarge(.command, ["data": Self.base64(5121)], path: "body.data")
    }

    @Test func commandDataMustBeNonEmptyBase64() {
        expectInvalid(.command, ["data": ""], field: "body.data")
        expectInvalid(.command, ["data": "not base64!"], field: "body.data")
        expectInvalid(.command, ["data": "A"], field: "body.data")
        expectInvalid(.command, ["data": "AQ-_"], field: "body.data")
        expectInvalid(.command, ["data": 12], field: "body.data")
        expectInvalid(.command, [:], field: "body.data")
    }

    // MARK: - 20 barrage

    @Test func barrageHappyPath() {
        #expect(expectValid(.barrage, ["text": "666", "font": 3])?.json == ["text": "666"])
    }

    @Test func barrageTextIs1To5120BytesWhateverTextMaxBytes() {
        expectValid(.barrage, ["text": Self.bytes(5120)], textMaxBytes: 64)
        tooLarge(.barrage, ["text": Self.bytes(5121)], path: "body.text", textMaxBytes: 32768)
        expectInvalid(.barrage, ["text": ""], field: "body.text")
        expectInvalid(.barrage, [:], field: "body.text")
    }

    // MARK: - 11 image

    @Test func imageHappyPathKeepsTableOrderAndDropsUnknownKeys() {
        let body = expectValid(
            .image,
            [
                "large_height": 2000, "junk": true, "url": "https://cdn.example/p/1.png", "file_name": "1.png",
                "thumbnail_url": "http://cdn.example/t.png", "height": 600, "width": 800, "file_size": 0,
                "mime_type": "image/png", "thumbnail_width": 80, "thumbnail_height": 60,
                "large_image_url": "https://cdn.example/l.png", "large_width": 3000, "duration_ms": 5,
            ])
        #expect(
            body?.json.objectValue?.keys == [
                "url", "file_name", "file_size", "mime_type", "width", "height", "thumbnail_url", "thumbnail_width",
                "thumbnail_height", "large_image_url", "large_width", "large_height",
            ])
        #expect(body?.json["large_height"] == 2000)
        // Optional fields the sender left out stay absent.
        #expect(expectValid(.image, Self.image)?.json == Self.image)
    }

    @Test(arguments: ["a.jpg", "a.jpeg", "a.png", "a.bmp", "a.gif", "a.tiff", "A.JPG", "x.y.Jpeg", "photo.TiFf"])
    func imageAcceptsItsExtensionsCaseInsensitively(name: String) {
        expectValid(.image, Self.with(Self.image, "file_name", .string(name)))
    }

    @Test(arguments: ["a.webp", "a.tif", "a.png.exe", "png", "a.", ".png", "a.jpg "])
    func imageRejectsOtherExtensions(name: String) {
        expectProblem(.image, Self.with(Self.image, "file_name", .string(name)), 422, .fileTypeUnsupported, path: "body.file_name")
    }

    @Test func sizesAreIntegersAtLeastZero() {
        for key in ["file_size", "width", "height", "thumbnail_width", "thumbnail_height", "large_width", "large_height"] {
            expectValid(.image, Self.with(Self.image, key, 0))
            expectValid(.image, Self.with(Self.image, key, .int(Int64.max)))
            expectInvalid(.image, Self.with(Self.image, key, -1), field: "body.\(key)")
            expectInvalid(.image, Self.with(Self.image, key, 1.5), field: "body.\(key)")
            expectInvalid(.image, Self.with(Self.image, key, "1"), field: "body.\(key)")
        }
        expectInvalid(.file, Self.with(Self.file, "file_size", -1), field: "body.file_size")
        expectInvalid(.audio, Self.with(Self.audio, "file_size", -1), field: "body.file_size")
        expectInvalid(.video, Self.with(Self.video, "first_frame_width", -1), field: "body.first_frame_width")
    }

    @Test func imageRequiresUrlAndFileName() {
        expectInvalid(MessageType.image.rawValue, ["width": 3], fields: ["body.url", "body.file_name"])
    }

    // MARK: - URLs and file names (every media type)

    @Test func urlsAreAtMost2048Bytes() {
        let prefix = "https://cdn.example/"
        let exact = JSONValue.string(prefix + String(repeating: "p", count: 2048 - prefix.utf8.count))
        let over = JSONValue.string(prefix + String(repeating: "p", count: 2049 - prefix.utf8.count))
        for key in ["url", "thumbnail_url", "large_image_url"] {
            expectValid(.image, Self.with(Self.image, key, exact))
            expectInvalid(.image, Self.with(Self.image, key, over), field: "body.\(key)")
        }
        expectValid(.video, Self.with(Self.video, "first_frame_url", exact))
        expectInvalid(.video, Self.with(Self.video, "first_frame_url", over), field: "body.first_frame_url")
    }

    @Test(arguments: [
        "ftp://cdn.example/a.png", "/a.png", "cdn.example/a.png", "https:/cdn.example/a.png", "http://", "https:///a.png",
        "http://:80/a.png", "http://host:8o/a.png", "https://cdn.example/a b.png", "https://cdn.example/a\n.png", "",
        "http://[::1/a.png", "mailto:a@b.c",
    ])
    func urlsMustBeAbsoluteHTTP(url: String) {
        expectInvalid(.image, Self.with(Self.image, "url", .string(url)), field: "body.url")
        expectInvalid(.file, Self.with(Self.file, "url", .string(url)), field: "body.url")
    }

    @Test(arguments: [
        "http://a", "HTTPS://CDN.example/a.png", "https://user:pw@cdn.example:8443/a.png?x=1#f", "http://[::1]:8080/a",
        "http://127.0.0.1/a", "https://cdn.example?x", "https://例え.jp/写真.png",
    ])
    func absoluteHTTPURLsAreAccepted(url: String) {
        expectValid(.image, Self.with(Self.image, "url", .string(url)))
    }

    @Test func fileNameIs1To255Bytes() {
        let exact = JSONValue.string(String(repeating: "n", count: 251) + ".png")
        let over = JSONValue.string(String(repeating: "n", count: 252) + ".png")
        for (type, body) in [(MessageType.image, Self.image), (.file, Self.file)] {
            expectValid(type, Self.with(body, "file_name", exact))
            expectInvalid(type, Self.with(body, "file_name", over), field: "body.file_name")
            expectInvalid(type, Self.with(body, "file_name", ""), field: "body.file_name")
        }
        // An over-long name is a 400 even when its extension is also wrong (400 outranks 422).
        expectInvalid(.audio, Self.with(Self.audio, "file_name", .string(String(repeating: "n", count: 252) + ".wav")), field: "body.file_name")
    }

    // MARK: - 12 file

    @Test func fileHappyPathAcceptsAnyExtension() {
        let body = expectValid(.file, ["url": "https://cdn.example/r.XYZ", "file_name": "r.XYZ", "file_size": 10, "mime_type": "x/y", "width": 3])
        #expect(body?.json == ["url": "https://cdn.example/r.XYZ", "file_name": "r.XYZ", "file_size": 10, "mime_type": "x/y"])
        expectValid(.file, Self.with(Self.file, "file_name", "archive.tar.gz"))
    }

    @Test(arguments: ["README", "trailing.", ".profile"])
    func fileNameNeedsAnExtension(name: String) {
        expectInvalid(.file, Self.with(Self.file, "file_name", .string(name)), field: "body.file_name")
    }

    @Test func mimeTypeIsAtMost255Bytes() {
        expectValid(.file, Self.with(Self.file, "mime_type", Self.bytes(255)))
        expectInvalid(.file, Self.with(Self.file, "mime_type", Self.bytes(256)), field: "body.mime_type")
        expectInvalid(.image, Self.with(Self.image, "mime_type", 3), field: "body.mime_type")
    }

    // MARK: - 13 audio

    @Test func audioHappyPath() {
        let body = expectValid(.audio, Self.with(Self.with(Self.audio, "file_size", 99), "mime_type", "audio/mpeg"))
        // Audio has no mime_type in the body table, so it is dropped.
        #expect(body?.json.objectValue?.keys == ["url", "file_name", "duration_ms", "file_size"])
        expectValid(.audio, Self.with(Self.audio, "file_name", "VOICE.MP3"))
    }

    @Test func audioAcceptsOnlyMp3() {
        expectProblem(.audio, Self.with(Self.audio, "file_name", "a.wav"), 422, .fileTypeUnsupported, path: "body.file_name")
        expectProblem(.audio, Self.with(Self.audio, "file_name", "a.mp4"), 422, .fileTypeUnsupported, path: "body.file_name")
    }

    @Test func durationIsRequiredAndAtLeastOne() {
        for (type, body) in [(MessageType.audio, Self.audio), (.video, Self.video)] {
            expectValid(type, Self.with(body, "duration_ms", 1))
            expectInvalid(type, Self.with(body, "duration_ms", 0), field: "body.duration_ms")
            expectInvalid(type, Self.with(body, "duration_ms", 1.5), field: "body.duration_ms")
            var missing = body.objectValue!
            missing["duration_ms"] = nil
            expectInvalid(type, .object(missing), field: "body.duration_ms")
        }
    }

    // MARK: - 14 video

    @Test func videoHappyPath() {
        let full = Self.with(
            Self.with(
                Self.with(Self.with(Self.video, "first_frame_url", "https://cdn.example/f.jpg"), "first_frame_width", 640), "first_frame_height", 360),
            "thumbnail_url", "https://cdn.example/t.jpg")
        let body = expectValid(.video, full)
        #expect(
            body?.json.objectValue?.keys == ["url", "file_name", "duration_ms", "first_frame_url", "first_frame_width", "first_frame_height"])
    }

    @Test func videoAcceptsMp4AndMov() {
        expectValid(.video, Self.with(Self.video, "file_name", "clip.MOV"))
        expectValid(.video, Self.with(Self.video, "file_name", "clip.mp4"))
        expectProblem(.video, Self.with(Self.video, "file_name", "clip.avi"), 422, .fileTypeUnsupported, path: "body.file_name")
    }

    // MARK: - 200 custom

    @Test func customHappyPath() {
        let body = expectValid(.custom, ["data": "{\"k\":1}", "sub_type": 7, "searched_content": "find me", "other": 1])
        #expect(body?.json == ["data": "{\"k\":1}", "sub_type": 7, "searched_content": "find me"])
        // Empty data is allowed (only text has a minimum); searched_content is optional.
        #expect(expectValid(.custom, ["data": "", "sub_type": 0])?.json == ["data": "", "sub_type": 0])
    }

    @Test(arguments: [64, 2048])
    func customDataIsAtMostTextMaxBytes(limit: Int) {
        expectValid(.custom, ["data": Self.bytes(limit), "sub_type": 1], textMaxBytes: limit)
        tooLarge(.custom, ["data": Self.bytes(limit + 1), "sub_type": 1], path: "body.data", textMaxBytes: limit)
    }

    @Test func customSubTypeIs0To200() {
        expectValid(.custom, ["data": "x", "sub_type": 0])
        expectValid(.custom, ["data": "x", "sub_type": 200])
        expectInvalid(.custom, ["data": "x", "sub_type": -1], field: "body.sub_type")
        expectInvalid(.custom, ["data": "x", "sub_type": 201], field: "body.sub_type")
        expectInvalid(.custom, ["data": "x", "sub_type": "1"], field: "body.sub_type")
        expectInvalid(.custom, ["data": "x"], field: "body.sub_type")
        expectInvalid(.custom, ["sub_type": 1], field: "body.data")
    }

    @Test func searchedContentIsAtMost64Bytes() {
        expectValid(.custom, ["data": "x", "sub_type": 1, "searched_content": Self.bytes(64)])
        expectInvalid(.custom, ["data": "x", "sub_type": 1, "searched_content": Self.bytes(65)], field: "body.searched_content")
        expectInvalid(.custom, ["data": "x", "sub_type": 1, "searched_content": Self.bytes(33, "é")], field: "body.searched_content")
    }

    // MARK: - 100 combine

    @Test func combineHappyPath() {
        let body = expectValid(.combine, ["title": "Chat history", "summary": "a: hi", "message_ids": ["m2", "m1"], "x": 1])
        #expect(body?.combineMessageIDs == ["m2", "m1"])
        #expect(body?.json == ["title": "Chat history", "summary": "a: hi", "message_ids": ["m2", "m1"]])
        let stored = body?.combineStored(combineID: "cb1", messageCount: 2)
        #expect(stored == ["combine_id": "cb1", "title": "Chat history", "summary": "a: hi", "message_count": 2])
        #expect(stored?.objectValue?.keys == ["combine_id", "title", "summary", "message_count"])
        // summary defaults to "".
        #expect(expectValid(.combine, ["title": "t", "message_ids": ["m1"]])?.json["summary"] == "")
    }

    @Test func combineTitleIs1To128Bytes() {
        expectValid(.combine, ["title": Self.bytes(128), "message_ids": ["m1"]])
        expectInvalid(.combine, ["title": Self.bytes(129), "message_ids": ["m1"]], field: "body.title")
        expectInvalid(.combine, ["title": "", "message_ids": ["m1"]], field: "body.title")
        expectInvalid(.combine, ["message_ids": ["m1"]], field: "body.title")
    }

    @Test func combineSummaryIsAtMost512Bytes() {
        expectValid(.combine, ["title": "t", "summary": Self.bytes(512), "message_ids": ["m1"]])
        expectInvalid(.combine, ["title": "t", "summary": Self.bytes(513), "message_ids": ["m1"]], field: "body.summary")
    }

    @Test func combineTakes1To100MessageIDs() {
        let ids = (0..<101).map { JSONValue.string(IdentifierKind.generateSortableID(prefix: "m", timestampMs: 1_700_000_000_000 + Int64($0))) }
        expectValid(.combine, ["title": "t", "message_ids": .array(Array(ids.prefix(100)))])
        expectInvalid(.combine, ["title": "t", "message_ids": .array(ids)], field: "body.message_ids")
        expectInvalid(.combine, ["title": "t", "message_ids": []], field: "body.message_ids")
        expectInvalid(.combine, ["title": "t"], field: "body.message_ids")
    }

    @Test func combineMessageIDsAreOpaqueIDsWithoutRepeats() {
        expectInvalid(.combine, ["title": "t", "message_ids": ["m1", "bad id"]], field: "body.message_ids[1]")
        expectInvalid(.combine, ["title": "t", "message_ids": ["m1", .string(String(repeating: "m", count: 33))]], field: "body.message_ids[1]")
        expectInvalid(.combine, ["title": "t", "message_ids": ["m1", 2]], field: "body.message_ids[1]")
        expectInvalid(.combine, ["title": "t", "message_ids": ["m1", "m2", "m1"]], field: "body.message_ids[2]")
    }

    // MARK: - 10 multiple

    @Test func multipleHappyPathNormalisesEveryItem() {
        let body = expectValid(
            .multiple,
            [
                "items": [
                    ["type": 1, "body": ["text": "look", "bold": true], "extra": 1],
                    Self.item(.image, Self.with(Self.image, "junk", 1)), Self.item(.file, Self.file), Self.item(.audio, Self.audio),
                    Self.item(.video, Self.video), Self.item(.custom, Self.custom),
                ],
                "title": "dropped",
            ])
        #expect(
            body?.json == [
                "items": [
                    ["type": 1, "body": ["text": "look"]], Self.item(.image, Self.image), Self.item(.file, Self.file),
                    Self.item(.audio, Self.audio), Self.item(.video, Self.video), Self.item(.custom, Self.custom),
                ]
            ])
    }

    @Test func multipleHas1To20Items() {
        let twenty = Array(repeating: Self.item(.image, Self.image), count: 10) + Array(repeating: Self.item(.text, ["text": "t"]), count: 10)
        expectValid(.multiple, Self.multiple(twenty))
        expectInvalid(.multiple, Self.multiple(twenty + [Self.item(.text, ["text": "t"])]), field: "body.items")
        expectInvalid(.multiple, Self.multiple([]), field: "body.items")
        expectInvalid(.multiple, [:], field: "body.items")
        expectInvalid(.multiple, ["items": "x"], field: "body.items")
    }

    @Test func multipleHasAtMostTenImages() {
        let ten = Array(repeating: Self.item(.image, Self.image), count: 10)
        expectValid(.multiple, Self.multiple(ten))
        expectInvalid(.multiple, Self.multiple(ten + [Self.item(.image, Self.image)]), field: "body.items")
    }

    @Test(arguments: [MessageType.file, .audio, .video, .custom])
    func multipleHasAtMostOneOfEachFileAudioVideoCustom(type: MessageType) {
        let bodies: [MessageType: JSONValue] = [.file: Self.file, .audio: Self.audio, .video: Self.video, .custom: Self.custom]
        let one = bodies[type]!
        expectValid(.multiple, Self.multiple([Self.item(type, one), Self.item(.text, ["text": "t"])]))
        expectInvalid(.multiple, Self.multiple([Self.item(type, one), Self.item(type, one)]), field: "body.items")
    }

    @Test(arguments: [MessageType.command, .multiple, .barrage, .revoke, .tips, .combine])
    func multipleRejectsOtherItemTypesAs6000013(type: MessageType) {
        let items = [Self.item(.text, ["text": "t"]), Self.item(type, ["data": "AQ=="])]
        expectProblem(.multiple, Self.multiple(items), 422, .unsupportedOperation, path: "body.items[1].type")
    }

    @Test func multipleItemTypeMustBeAKnownInteger() {
        for bad: JSONValue in [0, 30, 99, "1", 1.5, .null] {
            expectInvalid(.multiple, Self.multiple([["type": bad, "body": ["text": "t"]]]), field: "body.items[0].type")
        }
        expectInvalid(MessageType.multiple.rawValue, Self.multiple([["body": ["text": "t"]]]), fields: ["body.items[0].type"])
        expectInvalid(.multiple, Self.multiple(["x"]), field: "body.items[0]")
        expectInvalid(.multiple, Self.multiple([["type": 1]]), field: "body.items[0].body")
        expectInvalid(.multiple, Self.multiple([["type": 1, "body": "t"]]), field: "body.items[0].body")
    }

    @Test func multipleItemsFollowTheirTypesRules() {
        let badURL = Self.item(.image, Self.with(Self.image, "url", "ftp://x/1.png"))
        expectInvalid(
            .multiple, Self.multiple([Self.item(.text, ["text": "t"]), Self.item(.text, ["text": "t"]), badURL]), field: "body.items[2].body.url")
        expectInvalid(.multiple, Self.multiple([Self.item(.text, ["text": ""])]), field: "body.items[0].body.text")
        expectInvalid(.multiple, Self.multiple([Self.item(.custom, ["data": "x", "sub_type": 201])]), field: "body.items[0].body.sub_type")
        expectInvalid(
            .multiple, Self.multiple([Self.item(.file, Self.with(Self.file, "file_name", "README"))]), field: "body.items[0].body.file_name")
        expectProblem(
            .multiple, Self.multiple([Self.item(.audio, Self.with(Self.audio, "file_name", "a.wav"))]), 422, .fileTypeUnsupported,
            path: "body.items[0].body.file_name")
    }

    @Test func multipleTextAndCustomItemsHaveTheTextLimit() {
        expectValid(.multiple, Self.multiple([Self.item(.text, ["text": Self.bytes(64)])]), textMaxBytes: 64)
        tooLarge(
            .multiple, Self.multiple([Self.item(.text, ["text": "ok"]), Self.item(.text, ["text": Self.bytes(65)])]), path: "body.items[1].body.text",
            textMaxBytes: 64)
        tooLarge(
            .multiple, Self.multiple([Self.item(.custom, ["data": Self.bytes(65), "sub_type": 1])]), path: "body.items[0].body.data", textMaxBytes: 64
        )
    }

    // MARK: - Precedence (400 before 413 before 422)

    @Test func fieldErrorsOutrankSizes() {
        let items = [Self.item(.text, ["text": Self.bytes(70)]), Self.item(.image, ["file_name": "a.png"])]
        expectInvalid(.multiple, Self.multiple(items), field: "body.items[1].body.url", textMaxBytes: 64)
    }

    @Test func sizesOutrankExtensions() {
        let items = [Self.item(.image, Self.with(Self.image, "file_name", "a.webp")), Self.item(.text, ["text": Self.bytes(70)])]
        tooLarge(.multiple, Self.multiple(items), path: "body.items[1].body.text", textMaxBytes: 64)
    }

    @Test func extensionsOutrankItemTypes() {
        let items = [Self.item(.command, ["data": "AQ=="]), Self.item(.image, Self.with(Self.image, "file_name", "a.webp"))]
        expectProblem(.multiple, Self.multiple(items), 422, .fileTypeUnsupported, path: "body.items[1].body.file_name")
    }

    @Test func fieldErrorsOutrankItemTypesAndCountsAreFieldErrors() {
        let items = [Self.item(.command, ["data": "AQ=="]), Self.item(.file, Self.file), Self.item(.file, Self.file)]
        expectInvalid(.multiple, Self.multiple(items), field: "body.items")
    }

    @Test func everyFieldErrorIsListed() {
        expectInvalid(
            MessageType.image.rawValue, ["url": "x", "file_name": "", "width": -1, "large_image_url": 3],
            fields: ["body.url", "body.file_name", "body.width", "body.large_image_url"])
    }

    @Test func readFromRequestMergesFieldErrorsAndRanksThemFirst() throws {
        func read(_ request: JSONValue, textMaxBytes: Int = 64) -> Result<(MessageBody?, [String]), APIError> {
            var reader = BodyReader(request.objectValue!, path: "")
            _ = reader.id("to", .userID, required: true)
            do {
                let body = try MessageBodyValidator.read(from: &reader, textMaxBytes: textMaxBytes)
                return .success((body, reader.errors.map(\.field)))
            } catch {
                return .failure(error)
            }
        }
        // A 413 body with an invalid `to`: the 400 wins, so nothing is thrown and the reader holds `to` only.
        let large = try read(["to": "bad id", "type": 1, "body": ["text": Self.bytes(65)]]).get()
        #expect(large.0 == nil && large.1 == ["to"])
        // Field errors of the body join the request's.
        let both = try read(["to": "", "type": 11, "body": ["url": "x", "file_name": "a.png"]]).get()
        #expect(both.0 == nil && both.1 == ["to", "body.url"])
        let noType = try read(["to": "u1"]).get()
        #expect(noType.1 == ["type", "body"])
        let revoke = try read(["to": "u1", "type": 31, "body": [:]]).get()
        #expect(revoke.1 == ["type"])
        // With a valid request the 413 is thrown, and a valid body is returned.
        switch read(["to": "u1", "type": 1, "body": ["text": Self.bytes(65)]]) {
        case .success(let r): Issue.record("expected 413, got \(r)")
        case .failure(let e): #expect(e.code.code == ErrorCode.messageTooLarge.code && e.detail.hasPrefix("body.text "))
        }
        let ok = try read(["to": "u1", "type": 1, "body": ["text": "hi"]]).get()
        #expect(ok.0?.json == ["text": "hi"] && ok.1.isEmpty)
    }

    // MARK: - Sensitive-word filter views

    @Test func filterableTextsAreTextBarrageAndTextItemsOnly() throws {
        #expect(expectValid(.text, ["text": "hi"])?.filterableTexts == ["hi"])
        #expect(expectValid(.barrage, ["text": "wow"])?.filterableTexts == ["wow"])
        let multi = expectValid(
            .multiple,
            Self.multiple([
                Self.item(.text, ["text": "one"]), Self.item(.image, Self.image), Self.item(.custom, Self.custom), Self.item(.text, ["text": "two"]),
            ]))
        #expect(multi?.filterableTexts == ["one", "two"])
        #expect(expectValid(.command, ["data": "AQ=="])?.filterableTexts == [])
        #expect(expectValid(.custom, ["data": "bad words", "sub_type": 1, "searched_content": "bad"])?.filterableTexts == [])
        #expect(expectValid(.image, Self.image)?.filterableTexts == [])
        #expect(expectValid(.combine, ["title": "bad", "message_ids": ["m1"]])?.filterableTexts == [])
    }

    @Test func mapFilterableTextsMasksOnlyFilterableTexts() throws {
        let mask: (String) -> String = { $0.replacing("bad", with: "***") }
        var text = try #require(expectValid(.text, ["text": "a bad day"]))
        text.mapFilterableTexts(mask)
        #expect(text.json == ["text": "a *** day"])

        var barrage = try #require(expectValid(.barrage, ["text": "bad"]))
        barrage.mapFilterableTexts(mask)
        #expect(barrage.json == ["text": "***"])

        let image = Self.with(Self.image, "file_name", "bad.png")
        var multi = try #require(
            expectValid(
                .multiple, Self.multiple([Self.item(.text, ["text": "bad one"]), Self.item(.image, image), Self.item(.text, ["text": "fine"])])))
        multi.mapFilterableTexts(mask)
        #expect(multi.json == Self.multiple([Self.item(.text, ["text": "*** one"]), Self.item(.image, image), Self.item(.text, ["text": "fine"])]))
        #expect(multi.filterableTexts == ["*** one", "fine"])

        let customJSON: JSONValue = ["data": "bad", "sub_type": 1, "searched_content": "bad"]
        var custom = try #require(expectValid(.custom, customJSON))
        custom.mapFilterableTexts(mask)
        #expect(custom.json == customJSON)
    }

    // MARK: - Push summary and search text

    @Test func pushSummaryCutsTextTo100Characters() {
        #expect(expectValid(.text, ["text": "hello"])?.pushSummary == "hello")
        #expect(expectValid(.text, ["text": Self.bytes(100)])?.pushSummary == String(repeating: "a", count: 100))
        #expect(expectValid(.text, ["text": Self.bytes(101)])?.pushSummary == String(repeating: "a", count: 100))
        // Characters, not bytes or scalars: a family emoji (5 scalars, 18 bytes) counts as one.
        let family = "👨‍👩‍👧"
        let summary = expectValid(.text, ["text": .string(String(repeating: family, count: 101))])?.pushSummary
        #expect(summary == String(repeating: family, count: 100))
        #expect(expectValid(.text, ["text": Self.bytes(101, "é")])?.pushSummary == String(repeating: "é", count: 100))
    }

    @Test func pushSummaryNamesOtherTypes() {
        #expect(expectValid(.image, Self.image)?.pushSummary == "[Image]")
        #expect(expectValid(.file, Self.file)?.pushSummary == "[File]")
        #expect(expectValid(.audio, Self.audio)?.pushSummary == "[Audio]")
        #expect(expectValid(.video, Self.video)?.pushSummary == "[Video]")
        #expect(expectValid(.custom, Self.custom)?.pushSummary == "[Message]")
        #expect(expectValid(.command, ["data": "AQ=="])?.pushSummary == "[Message]")
        #expect(expectValid(.barrage, ["text": "hi"])?.pushSummary == "[Message]")
        #expect(expectValid(.combine, ["title": "t", "message_ids": ["m1"]])?.pushSummary == "[Message]")
        #expect(expectValid(.multiple, Self.multiple([Self.item(.text, ["text": "t"])]))?.pushSummary == "[Message]")
    }

    @Test func searchableTextFollowsTheSearchTable() {
        #expect(expectValid(.text, ["text": "hello"])?.searchableText == "hello")
        #expect(expectValid(.custom, ["data": "x", "sub_type": 1, "searched_content": "find"])?.searchableText == "find")
        #expect(expectValid(.custom, Self.custom)?.searchableText == "")
        #expect(expectValid(.image, Self.image)?.searchableText == "1.png")
        #expect(expectValid(.file, Self.file)?.searchableText == "r.pdf")
        #expect(expectValid(.audio, Self.audio)?.searchableText == "a.mp3")
        #expect(expectValid(.video, Self.video)?.searchableText == "v.mp4")
        #expect(expectValid(.combine, ["title": "T", "summary": "S", "message_ids": ["m1"]])?.searchableFields == ["T", "S"])
        #expect(expectValid(.combine, ["title": "T", "message_ids": ["m1"]])?.searchableText == "T")
        let multi = expectValid(
            .multiple,
            Self.multiple([
                Self.item(.text, ["text": "one"]), Self.item(.image, Self.image),
                Self.item(.custom, ["data": "d", "sub_type": 1, "searched_content": "sc"]),
                Self.item(.file, Self.file),
            ]))
        #expect(multi?.searchableFields == ["one", "1.png", "r.pdf"])
        #expect(multi?.searchableText == "one\n1.png\nr.pdf")
        #expect(expectValid(.command, ["data": "AQ=="])?.searchableText == "")
        #expect(expectValid(.barrage, ["text": "hi"])?.searchableText == "")
    }

    /// The dedupe key copy of an unstored message (``MessageWrite/sentJSON(_:)``): no `push`, and `suppressed` added
    /// for a suppressed message, closing the same object. (Events carry the app view, UserEventLogTests.)
    @Test func theDedupeKeyJSONOfAMessage() throws {
        var m = Message.tombstone(
            messageID: "m1", clientMsgID: "c\"1", conversationType: .peer, from: "u1", to: "u2", seq: 7, timestamp: 1_700)
        m.deleted = false
        m.type = 1
        m.body = Array(#"{"text":"hi"}"#.utf8)
        m.push = Array("{}".utf8)
        #expect(!String(decoding: MessageWrite.sentJSON(m), as: UTF8.self).contains("\"push\""))
        #expect(!String(decoding: MessageWrite.sentJSON(m), as: UTF8.self).contains("\"suppressed\""))
        m.suppressed = "blacklist"
        let suppressed = try JSONValue.parse(MessageWrite.sentJSON(m))
        #expect(suppressed["suppressed"]?.stringValue == "blacklist")
        #expect(suppressed["seq"]?.intValue == 7)
        #expect(suppressed["client_msg_id"]?.stringValue == "c\"1")
    }
}
