/// Opaque, tamper-evident pagination cursors (docs/api.md).
///
/// A cursor is `base64url(payload) "." base64url(HMAC-SHA256(secret, payload)[0..<16])`, where the payload is the
/// JSON `{"l": list, "v": [sort key values of the last item]}`. The MAC stops callers from forging positions (and
/// from probing other apps' lists); `list` names the list *and* its filters (e.g. `"users|state=all"`), so a
/// cursor replayed on another list or with other filters is rejected. Both failures map to 400 `7000007`.
///
/// ```swift
/// let codec = CursorCodec(secret: serverSecret)
/// let next = codec.encode(list: "users|all", values: [.int(createdAt), .string(userID)])
/// let keys = try codec.decode(next, list: "users|all")   // [.int(createdAt), .string(userID)]
/// ```
public struct CursorCodec: Sendable {
    /// Why a cursor was rejected; the API answers every case with `invalid_cursor`.
    public enum Failure: Error, Sendable, Equatable {
        /// Not two base64url segments, or the payload is not the expected JSON.
        case malformed
        /// The MAC does not match (tampered, or minted under another secret).
        case badSignature
        /// Minted for another list or other filters.
        case wrongList

        public var errorCode: ErrorCode { .invalidCursor }
    }

    /// Bytes of MAC kept: 128 bits is plenty against forgery and keeps cursors short.
    private static let macLength = 16
    /// The first signs; every one verifies (a server admin key being rotated keeps its cursors valid).
    private let secrets: [[UInt8]]

    public init(secret: [UInt8]) {
        self.secrets = [secret]
    }

    /// A codec that signs with `secrets[0]` and accepts a cursor signed with any of them.
    public init(secrets: [[UInt8]]) {
        precondition(!secrets.isEmpty, "a cursor codec needs a secret to sign with")
        self.secrets = secrets
    }

    /// A cursor positioned after the item whose sort keys are `values`.
    public func encode(list: String, values: [JSONValue]) -> String {
        var w = JSONWriter(capacity: 64)
        w.object { w in
            w.key("l")
            w.writeString(list)
            w.key("v")
            w.write(.array(values))
        }
        let mac = Crypto.hmacSHA256(key: secrets[0], message: w.bytes).prefix(Self.macLength)
        return Crypto.base64URLEncode(w.bytes) + "." + Crypto.base64URLEncode(mac)
    }

    /// The sort-key values of a cursor minted by ``encode(list:values:)`` for the same `list`.
    public func decode(_ cursor: String, list: String) throws(Failure) -> [JSONValue] {
        // Cursors are short; refuse absurd input before decoding anything.
        guard cursor.utf8.count <= 4096 else { throw .malformed }
        let parts = cursor.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let payload = Crypto.base64URLDecode(parts[0]),
            let mac = Crypto.base64URLDecode(parts[1]), mac.count == Self.macLength
        else { throw .malformed }
        let signed = secrets.contains { Crypto.constantTimeEquals(Crypto.hmacSHA256(key: $0, message: payload).prefix(Self.macLength), mac) }
        guard signed else { throw .badSignature }
        guard case .object(let o)? = try? JSONValue.parse(payload, maxDepth: 8),
            case .string(let l)? = o["l"], case .array(let values)? = o["v"]
        else { throw .malformed }
        guard l == list else { throw .wrongList }
        return values
    }
}
