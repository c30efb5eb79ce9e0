import ParleyCore

/// The archive of a user's data export (docs/privacy.md#user-data-export): a ZIP file whose entries are stored
/// (method 0, no compression), written an entry at a time by the job's steps.
///
/// Why a stored ZIP: every operating system opens it without extra tools, and it can be written in pieces that each
/// commit on their own — an entry's header needs only its own CRC-32 and size, known once the step has the entry's
/// bytes, and the central directory at the end lists the entries the checkpoint remembered. A compressed format would
/// need a compressor (Parley links no zlib) whose state cannot be carried from one step to the next in a checkpoint.
/// The bulk of an export is already compressed media and JSON is cheap to ship, so little is lost.
///
/// Plain ZIP (not ZIP64): offsets and sizes are 32-bit and there are at most 65,535 entries, which the export's
/// limits keep it under (``UserExport/maxArchiveBytes``, ``UserExport/maxEntries``).
enum UserExportArchive {
    /// One entry as the central directory lists it.
    struct Entry: Equatable {
        var name: String
        var crc: UInt32
        var size: UInt32
        var offset: UInt32

        /// `[name, crc, size, offset]`: compact, since the checkpoint carries every entry.
        var json: JSONValue { .array([.string(name), .int(Int64(crc)), .int(Int64(size)), .int(Int64(offset))]) }

        init(name: String, crc: UInt32, size: UInt32, offset: UInt32) {
            self.name = name
            self.crc = crc
            self.size = size
            self.offset = offset
        }

        init?(_ json: JSONValue) {
            guard let parts = json.arrayValue, parts.count == 4, let name = parts[0].stringValue, let crc = parts[1].intValue,
                let size = parts[2].intValue, let offset = parts[3].intValue
            else { return nil }
            self.init(
                name: name, crc: UInt32(truncatingIfNeeded: crc), size: UInt32(truncatingIfNeeded: size), offset: UInt32(truncatingIfNeeded: offset))
        }
    }

    /// The entry `name` holding `data`, written at byte `offset` of the archive: its local header and its bytes, and
    /// its central directory record.
    static func entry(_ name: String, _ data: [UInt8], at offset: Int64, modified: Int64) -> (bytes: [UInt8], entry: Entry) {
        let entry = Entry(name: name, crc: crc32(data), size: UInt32(data.count), offset: UInt32(offset))
        let nameBytes = Array(name.utf8)
        let (time, date) = dosTime(modified)
        var out: [UInt8] = []
        out.reserveCapacity(30 + nameBytes.count + data.count)
        out.le32(0x0403_4b50)
        out.le16(20)  // version needed: 2.0
        out.le16(0x0800)  // the name is UTF-8
        out.le16(0)  // stored
        out.le16(time)
        out.le16(date)
        out.le32(entry.crc)
        out.le32(entry.size)
        out.le32(entry.size)
        out.le16(UInt16(nameBytes.count))
        out.le16(0)
        out += nameBytes
        out += data
        return (out, entry)
    }

    /// The central directory of `entries` starting at byte `offset`, and the end-of-central-directory record.
    static func directory(_ entries: [Entry], at offset: Int64, modified: Int64) -> [UInt8] {
        let (time, date) = dosTime(modified)
        var out: [UInt8] = []
        for entry in entries {
            let nameBytes = Array(entry.name.utf8)
            out.le32(0x0201_4b50)
            out.le16(0x0314)  // made by: Unix, 2.0 (so the mode below is read)
            out.le16(20)
            out.le16(0x0800)
            out.le16(0)
            out.le16(time)
            out.le16(date)
            out.le32(entry.crc)
            out.le32(entry.size)
            out.le32(entry.size)
            out.le16(UInt16(nameBytes.count))
            out.le16(0)  // extra
            out.le16(0)  // comment
            out.le16(0)  // disk
            out.le16(0)  // internal attributes
            out.le32(0o100644 << 16)  // a regular file, rw-r--r--
            out.le32(entry.offset)
            out += nameBytes
        }
        let size = out.count
        out.le32(0x0605_4b50)
        out.le16(0)
        out.le16(0)
        out.le16(UInt16(entries.count))
        out.le16(UInt16(entries.count))
        out.le32(UInt32(size))
        out.le32(UInt32(offset))
        out.le16(0)
        return out
    }

    /// The MS-DOS time and date of `millis` (UTC), as ZIP headers carry them (two-second resolution, from 1980).
    static func dosTime(_ millis: Int64) -> (time: UInt16, date: UInt16) {
        let seconds = max(millis / 1000, 315_532_800)  // 1980-01-01
        let days = seconds / 86_400
        let secondOfDay = seconds % 86_400
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days + 719_468
        let era = z / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        let time = UInt16(secondOfDay / 3600) << 11 | UInt16(secondOfDay % 3600 / 60) << 5 | UInt16(secondOfDay % 60 / 2)
        let date = UInt16(min(year - 1980, 127)) << 9 | UInt16(month) << 5 | UInt16(day)
        return (time, date)
    }

    /// CRC-32 (IEEE 802.3, as ZIP uses it).
    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        bytes.withUnsafeBufferPointer { buffer in
            for byte in buffer { crc = crcTable[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        }
        return crc ^ 0xFFFF_FFFF
    }

    private static let crcTable: [UInt32] = (0..<256).map { n in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }
}

extension [UInt8] {
    fileprivate mutating func le16(_ value: UInt16) {
        append(UInt8(value & 0xFF))
        append(UInt8(value >> 8))
    }

    fileprivate mutating func le32(_ value: UInt32) {
        for shift in stride(from: 0, to: 32, by: 8) { append(UInt8((value >> UInt32(shift)) & 0xFF)) }
    }
}
