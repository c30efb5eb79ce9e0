import CParleyVips
import CVips
import Foundation
import Testing

@testable import ParleyDomains

/// Image derivation (`ImageDerivation`), without a server: inputs are made with libvips (in memory, or with the
/// `vips` command of libvips-tools), and every output is decoded again by libvips to check its size, its format and
/// that no metadata survived.
@Suite("Image derivation", .serialized)
struct ImageDerivationTests {
    static let maxPixels: Int64 = 50_000_000

    // MARK: - Sniffing

    @Test func sniffReadsMagicNumbersOnly() {
        #expect(ImageFormat.sniff([0xFF, 0xD8, 0xFF, 0xE0]) == .jpeg)
        #expect(ImageFormat.sniff([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0]) == .png)
        #expect(ImageFormat.sniff(Array("GIF89a...".utf8)) == .gif)
        #expect(ImageFormat.sniff(Array("GIF87a".utf8)) == .gif)
        #expect(ImageFormat.sniff([0x49, 0x49, 0x2A, 0x00, 8, 0, 0, 0]) == .tiff)
        #expect(ImageFormat.sniff([0x4D, 0x4D, 0x00, 0x2A, 0, 0, 0, 8]) == .tiff)
        #expect(ImageFormat.sniff(Array("RIFF\u{0}\u{0}\u{0}\u{0}WEBPVP8 ".utf8)) == .webp)
        #expect(ImageFormat.sniff([0, 0, 0, 0x18] + Array("ftypheic\u{0}\u{0}\u{0}\u{0}".utf8)) == .heic)
        #expect(ImageFormat.sniff(Self.bitmap(width: 1, height: 1, rows: [[0, 0, 0]]).prefix(18).map { $0 }) == .bmp)
        // Not images: text that starts like one, RIFF audio, an ISO media file of another brand, too few bytes.
        #expect(ImageFormat.sniff(Array("BMW drivers rejoice, the long-awaited".utf8)) == nil)
        #expect(ImageFormat.sniff(Array("RIFF\u{0}\u{0}\u{0}\u{0}WAVEfmt ".utf8)) == nil)
        #expect(ImageFormat.sniff([0, 0, 0, 0x18] + Array("ftypisom\u{0}\u{0}\u{0}\u{0}".utf8)) == nil)
        #expect(ImageFormat.sniff([0xFF, 0xD8]) == nil)
        #expect(ImageFormat.sniff([]) == nil)
        #expect(ImageFormat.sniff(Array("<svg xmlns=\"http://www.w3.org/2000/svg\"/>".utf8)) == nil)
    }

    // MARK: - Orientation and metadata

    /// A 400×200 JPEG whose EXIF says "rotate 90° to display" (orientation 6), with GPS fields, a camera make, XMP
    /// and an ICC profile: everything comes out upright (200×400) and nothing of the metadata survives.
    @Test func exifOrientationIsAppliedAndMetadataRemoved() throws {
        let source = try Self.jpegWithMetadata(width: 400, height: 200)
        let before = try Self.decoded(source)
        #expect(before.fields.contains("exif-ifd3-GPSLatitude"))
        #expect(before.fields.contains("xmp-data") && before.fields.contains("icc-profile-data"))
        #expect(Self.contains(source, Array("Exif\u{0}\u{0}".utf8)) && Self.contains(source, Array("http://ns.adobe.com/xap".utf8)))

        let derived = try ImageDerivation.derive(source: source, maxPixels: Self.maxPixels)
        #expect(derived.sourceFormat == .jpeg)
        #expect((derived.width, derived.height) == (200, 400))
        try Self.expect(derived.original, 200, 400, "image/jpeg")
        try Self.expect(derived.large, 200, 400, "image/jpeg")  // the shorter side is under 720: kept
        try Self.expect(derived.thumbnail, 198, 396, "image/jpeg")
        // The left half of the source is white: turned 90° clockwise, it is the top half.
        let upright = try Self.decoded(derived.original.bytes)
        #expect(upright.mean(top: true) > 200 && upright.mean(top: false) < 50)
    }

    // MARK: - Sizes

    @Test func twelveMegapixelJPEGGivesTheDocumentedSizes() throws {
        let derived = try ImageDerivation.derive(source: try Self.photo12MP(), maxPixels: Self.maxPixels)
        try Self.expect(derived.original, 4000, 3000, "image/jpeg")
        try Self.expect(derived.large, 960, 720, "image/jpeg")
        try Self.expect(derived.thumbnail, 264, 198, "image/jpeg")
    }

    @Test func portraitKeepsItsShorterSideRule() throws {
        let source = try Self.encode(Self.image(width: 1500, height: 3000, bands: 3) { x, y, _ in UInt8((x + y) % 256) }, png: false)
        let derived = try ImageDerivation.derive(source: source, maxPixels: Self.maxPixels)
        try Self.expect(derived.large, 720, 1440, "image/jpeg")
        try Self.expect(derived.thumbnail, 198, 396, "image/jpeg")
    }

    @Test func smallImagesAreNeverEnlarged() throws {
        let source = try Self.encode(Self.image(width: 100, height: 50, bands: 3) { x, _, _ in UInt8(x * 2) }, png: false)
        let derived = try ImageDerivation.derive(source: source, maxPixels: Self.maxPixels)
        for variant in [derived.original, derived.large, derived.thumbnail] {
            try Self.expect(variant, 100, 50, "image/jpeg")
        }
    }

    // MARK: - Formats

    @Test func transparentPNGStaysPNG() throws {
        // 300×200 RGBA, the right third fully transparent.
        let source = try Self.encode(Self.image(width: 300, height: 200, bands: 4) { x, _, band in band == 3 ? (x < 200 ? 255 : 0) : 90 }, png: true)
        let derived = try ImageDerivation.derive(source: source, maxPixels: Self.maxPixels)
        try Self.expect(derived.original, 300, 200, "image/png", bands: 4)
        try Self.expect(derived.large, 300, 200, "image/png", bands: 4)
        try Self.expect(derived.thumbnail, 297, 198, "image/png", bands: 4)
    }

    @Test func opaquePNGBecomesJPEG() throws {
        let withOpaqueAlpha = try Self.encode(Self.image(width: 64, height: 48, bands: 4) { _, y, band in band == 3 ? 255 : UInt8(y * 5) }, png: true)
        let derived = try ImageDerivation.derive(source: withOpaqueAlpha, maxPixels: Self.maxPixels)
        try Self.expect(derived.original, 64, 48, "image/jpeg", bands: 3)
        let grey = try Self.encode(Self.image(width: 64, height: 48, bands: 1) { x, _, _ in UInt8(x * 4) }, png: true)
        try Self.expect(try ImageDerivation.derive(source: grey, maxPixels: Self.maxPixels).original, 64, 48, "image/jpeg", bands: 1)
    }

    /// A two-frame GIF (100×100 each): only the first frame is decoded and served.
    @Test func gifGivesItsFirstFrame() throws {
        let frames = try Self.image(width: 100, height: 200, bands: 3) { _, y, band in y < 100 ? 255 : (band == 0 ? 255 : 0) }
        vips_image_set_int(frames.pointer, "page-height", 100)
        let source = try Self.saved(frames, as: "gif")
        #expect(try Self.decoded(source).fields.contains("n-pages"))
        let derived = try ImageDerivation.derive(source: source, maxPixels: Self.maxPixels)
        #expect(derived.sourceFormat == .gif)
        try Self.expect(derived.original, 100, 100, "image/jpeg", bands: 3)
        #expect(try Self.decoded(derived.original.bytes).mean(top: false) > 240)  // the white frame, not the red one
    }

    @Test func tiffWebPHEICAndBMPAreRead() throws {
        let photo = try Self.image(width: 80, height: 60, bands: 3) { x, y, band in UInt8((x * 3 + y * band) % 256) }
        let tiff = try ImageDerivation.derive(source: try Self.saved(photo, as: "tif"), maxPixels: Self.maxPixels)
        #expect(tiff.sourceFormat == .tiff)
        try Self.expect(tiff.original, 80, 60, "image/jpeg")
        let translucent = try Self.image(width: 80, height: 60, bands: 4) { _, _, band in band == 3 ? 128 : 40 }
        let webp = try ImageDerivation.derive(source: try Self.saved(translucent, as: "webp"), maxPixels: Self.maxPixels)
        #expect(webp.sourceFormat == .webp)
        try Self.expect(webp.original, 80, 60, "image/png", bands: 4)
        let heic = try ImageDerivation.derive(source: try Self.saved(photo, as: "heic"), maxPixels: Self.maxPixels)
        #expect(heic.sourceFormat == .heic)
        try Self.expect(heic.original, 80, 60, "image/jpeg")
        // A 2×2 BMP, bottom-up rows: red, green above blue, white.
        let bmp = Self.bitmap(width: 2, height: 2, rows: [[255, 0, 0, 255, 255, 255], [0, 0, 255, 0, 255, 0]])
        let derived = try ImageDerivation.derive(source: bmp, maxPixels: Self.maxPixels)
        #expect(derived.sourceFormat == .bmp)
        try Self.expect(derived.original, 2, 2, "image/jpeg")
    }

    // MARK: - Refusals

    @Test func truncatedJPEGCannotDecode() throws {
        let whole = try Self.photo12MP()
        let truncated = Array(whole.prefix(whole.count / 3))
        #expect(throws: ImageDerivationError.self) { try ImageDerivation.derive(source: truncated, maxPixels: Self.maxPixels) }
        do {
            _ = try ImageDerivation.derive(source: truncated, maxPixels: Self.maxPixels)
        } catch let error as ImageDerivationError {
            guard case .cannotDecode = error else {
                Issue.record("expected cannotDecode, got \(error)")
                return
            }
        }
        // A PNG signature over garbage is a known format that does not decode, not "not an image".
        let garbage = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + [UInt8](repeating: 7, count: 200)
        #expect(Self.failure(garbage) == "cannotDecode")
    }

    /// A PNG whose header declares 100000×100000 pixels (10 gigapixels) in 57 bytes: refused from the header, at
    /// once, with no pixel buffer allocated (a decode would need 30 GB).
    @Test func decompressionBombIsRefusedFromItsHeader() throws {
        let started = ContinuousClock.now
        #expect(Self.failure(Self.pngHeader(width: 100_000, height: 100_000)) == "overMaxPixels")
        let bmpBomb =
            Array(Self.bitmap(width: 1, height: 1, rows: [[0, 0, 0]])[0..<18]) + Self.le32(100_000) + Self.le32(100_000)
            + [UInt8](repeating: 0, count: 40)
        #expect(Self.failure(bmpBomb) == "overMaxPixels")
        #expect(ContinuousClock.now - started < .seconds(1))
        // The limit is the app's: a 4000×3000 image is over a 10-megapixel limit.
        #expect(Self.failure(try Self.photo12MP(), maxPixels: 10_000_000) == "overMaxPixels")
    }

    @Test func otherContentIsNotAnImage() {
        var generator = SystemRandomNumberGenerator()
        let random = (0..<4096).map { _ in UInt8.random(in: 0...255, using: &generator) }
        #expect(Self.failure(random) == "notAnImage")
        #expect(Self.failure(Array("%PDF-1.7\n".utf8)) == "notAnImage")
        #expect(Self.failure([]) == "notAnImage")
    }

    // MARK: - Cost

    /// Prints the CPU time of deriving a 12-megapixel JPEG's three images (a report, not an assertion: the machine
    /// may be busy). It is the whole process's CPU, so it means something only when this suite runs alone
    /// (`--filter ImageDerivation`); nearly all of it is libvips, which is the same in debug and release builds.
    @Test func twelveMegapixelCost() throws {
        let source = try Self.photo12MP()
        _ = try ImageDerivation.derive(source: source, maxPixels: Self.maxPixels)  // warm: libvips' first-use setup
        var samples: [Double] = []
        for _ in 0..<5 {
            let before = Self.cpuSeconds()
            _ = try ImageDerivation.derive(source: source, maxPixels: Self.maxPixels)
            samples.append((Self.cpuSeconds() - before) * 1000)
        }
        let shown = samples.map { String(format: "%.0f", $0) }.joined(separator: ", ")
        print("image derivation: 12 MP JPEG (\(source.count) bytes) → original + large + thumbnail, CPU ms per run: \(shown)")
    }

    // MARK: - Helpers

    /// A 4000×3000 JPEG of blurred colour noise (harder to code than most photographs), made once per run.
    static let photo12MPResult: Result<[UInt8], any Error> = Result {
        let directory = try temporaryDirectory()
        func path(_ name: String) -> String { directory + "/" + name }
        for (band, seed) in [("r", 1), ("g", 2), ("b", 3)] {
            try vips(["gaussnoise", path("\(band).v"), "4000", "3000", "--mean", "128", "--sigma", "60", "--seed", "\(seed)"])
        }
        try vips(["bandjoin", "\(path("r.v")) \(path("g.v")) \(path("b.v"))", path("n.v")])
        try vips(["gaussblur", path("n.v"), path("s.v"), "1.5"])
        try vips(["cast", path("s.v"), path("u.v"), "uchar"])
        try vips(["jpegsave", path("u.v"), path("photo.jpg"), "--Q", "90"])
        return Array(try Data(contentsOf: URL(fileURLWithPath: path("photo.jpg"))))
    }

    static func photo12MP() throws -> [UInt8] { try photo12MPResult.get() }

    static func temporaryDirectory() throws -> String {
        let path = NSTemporaryDirectory() + "parley-image-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Runs the `vips` command of libvips-tools.
    static func vips(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/vips")
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw ImageDerivationError.cannotDecode("vips \(arguments) failed") }
    }

    /// An image made in memory, pixel by pixel.
    static func image(width: Int, height: Int, bands: Int, pixel: (Int, Int, Int) -> UInt8) throws -> VipsHandle {
        try Libvips.ready()
        var pixels = [UInt8](repeating: 0, count: width * height * bands)
        for y in 0..<height {
            for x in 0..<width {
                for band in 0..<bands { pixels[(y * width + x) * bands + band] = pixel(x, y, band) }
            }
        }
        let image = pixels.withUnsafeBytes {
            vips_image_new_from_memory_copy($0.baseAddress, $0.count, Int32(width), Int32(height), Int32(bands), VIPS_FORMAT_UCHAR)
        }
        let handle = VipsHandle(try #require(image))
        handle.pointer.pointee.Type = bands <= 2 ? VIPS_INTERPRETATION_B_W : VIPS_INTERPRETATION_sRGB
        return handle
    }

    /// The image as JPEG or PNG, keeping whatever metadata it carries.
    static func encode(_ image: VipsHandle, png: Bool) throws -> [UInt8] {
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        let status =
            png ? parley_vips_png_buffer(image.pointer, &buffer, &length, 0) : parley_vips_jpeg_buffer(image.pointer, &buffer, &length, 90, 0)
        defer { g_free(buffer) }
        try #require(status == 0 && buffer != nil, "\(Libvips.lastError())")
        return Array(UnsafeRawBufferPointer(start: buffer, count: length))
    }

    /// The image saved by libvips in the format of `suffix` (through a file: the format follows the name).
    static func saved(_ image: VipsHandle, as suffix: String) throws -> [UInt8] {
        let path = try temporaryDirectory() + "/image.\(suffix)"
        try #require(parley_vips_write_file(image.pointer, path) == 0, "\(Libvips.lastError())")
        return Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    /// A JPEG, white on its left half and black on its right, tagged orientation 6, with GPS and camera EXIF fields,
    /// an XMP packet and an ICC profile.
    static func jpegWithMetadata(width: Int, height: Int) throws -> [UInt8] {
        let pixels = try image(width: width, height: height, bands: 3) { x, _, _ in x < width / 2 ? 255 : 0 }
        let profiled = try VipsHandle { parley_vips_icc_to_srgb(pixels.pointer, $0) }  // attaches libvips' sRGB profile
        vips_image_set_int(profiled.pointer, "orientation", 6)
        vips_image_set_string(profiled.pointer, "exif-ifd0-Make", "ParleyCam")
        vips_image_set_string(profiled.pointer, "exif-ifd3-GPSLatitudeRef", "N")
        vips_image_set_string(profiled.pointer, "exif-ifd3-GPSLatitude", "52/1 31/1 0/1")
        vips_image_set_string(profiled.pointer, "exif-ifd3-GPSLongitudeRef", "E")
        vips_image_set_string(profiled.pointer, "exif-ifd3-GPSLongitude", "13/1 24/1 0/1")
        let xmp = Array(
            """
            <x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">\
            <rdf:Description xmlns:xmp="http://ns.adobe.com/xap/1.0/" xmp:CreatorTool="ParleyCam"/></rdf:RDF></x:xmpmeta>
            """.utf8)
        xmp.withUnsafeBytes { _ = vips_image_set_blob_copy(profiled.pointer, "xmp-data", $0.baseAddress, $0.count) }
        return try encode(profiled, png: false)
    }

    /// What libvips reads back from encoded bytes: size, bands, loader, metadata field names and the mean of the
    /// top and bottom halves.
    struct Decoded {
        let width: Int
        let height: Int
        let bands: Int
        let loader: String
        let fields: [String]
        let topMean: Double
        let bottomMean: Double
        func mean(top: Bool) -> Double { top ? topMean : bottomMean }
    }

    static func decoded(_ bytes: [UInt8]) throws -> Decoded {
        try Libvips.ready()
        return try bytes.withUnsafeBytes { raw in
            let image = VipsHandle(try #require(parley_vips_open_buffer(raw.baseAddress!, raw.count)))
            var names: [String] = []
            if let fields = vips_image_get_fields(image.pointer) {
                var index = 0
                while let name = fields[index] {
                    names.append(String(cString: name))
                    index += 1
                }
                g_strfreev(fields)
            }
            var loader: UnsafePointer<CChar>?
            _ = vips_image_get_string(image.pointer, "vips-loader", &loader)
            let loaderName = loader.map { String(cString: $0) } ?? ""
            let memory = try VipsHandle(copyingToMemory: image)  // decodes every pixel: the bytes are a whole image
            let width = Int(vips_image_get_width(memory.pointer))
            let height = Int(vips_image_get_height(memory.pointer))
            let bands = Int(vips_image_get_bands(memory.pointer))
            let pixels = UnsafeRawBufferPointer(start: vips_image_get_data(memory.pointer), count: width * height * bands)
            func mean(_ rows: Range<Int>) -> Double {
                var sum = 0
                for y in rows { for x in 0..<width * bands { sum += Int(pixels[y * width * bands + x]) } }
                return Double(sum) / Double(max(1, rows.count * width * bands))
            }
            return Decoded(
                width: width, height: height, bands: bands, loader: loaderName, fields: names, topMean: mean(0..<height / 2),
                bottomMean: mean(height / 2..<height))
        }
    }

    /// A variant is what it says: its size and type match what libvips decodes, and it carries no metadata.
    static func expect(
        _ variant: DerivedVariant, _ width: Int, _ height: Int, _ mimeType: String, bands: Int? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        #expect((variant.width, variant.height, variant.mimeType) == (width, height, mimeType), sourceLocation: sourceLocation)
        let read = try decoded(variant.bytes)
        #expect((read.width, read.height) == (width, height), sourceLocation: sourceLocation)
        #expect(read.loader == (mimeType == "image/png" ? "pngload_buffer" : "jpegload_buffer"), sourceLocation: sourceLocation)
        if let bands { #expect(read.bands == bands, sourceLocation: sourceLocation) }
        let metadata = read.fields.filter { $0.hasPrefix("exif-") || ["xmp-data", "icc-profile-data", "iptc-data"].contains($0) }
        #expect(metadata.isEmpty, "metadata left: \(metadata)", sourceLocation: sourceLocation)
        #expect(!contains(variant.bytes, Array("Exif\u{0}\u{0}".utf8)), sourceLocation: sourceLocation)
        #expect(!contains(variant.bytes, Array("http://ns.adobe.com/xap".utf8)), sourceLocation: sourceLocation)
        #expect(!contains(variant.bytes, Array("ICC_PROFILE".utf8)) && !contains(variant.bytes, Array("iCCP".utf8)), sourceLocation: sourceLocation)
    }

    static func contains(_ bytes: [UInt8], _ needle: [UInt8]) -> Bool {
        guard bytes.count >= needle.count else { return false }
        return (0...bytes.count - needle.count).contains { start in bytes[start..<start + needle.count].elementsEqual(needle) }
    }

    /// The case name of the error deriving `bytes` throws, or "none".
    static func failure(_ bytes: [UInt8], maxPixels: Int64 = maxPixels) -> String {
        do {
            _ = try ImageDerivation.derive(source: bytes, maxPixels: maxPixels)
            return "none"
        } catch let error as ImageDerivationError {
            switch error {
            case .overMaxPixels: return "overMaxPixels"
            case .cannotDecode: return "cannotDecode"
            case .notAnImage: return "notAnImage"
            }
        } catch {
            return "\(error)"
        }
    }

    static func le32(_ value: Int) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }
    static func be32(_ value: Int) -> [UInt8] { (0..<4).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }

    /// A PNG signature and IHDR chunk (8-bit RGB) declaring `width`×`height`, with its CRC, then an empty IDAT and IEND.
    static func pngHeader(width: Int, height: Int) -> [UInt8] {
        func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
            let body = Array(type.utf8) + data
            return be32(data.count) + body + be32(Int(crc32(body)))
        }
        let ihdr = be32(width) + be32(height) + [8, 2, 0, 0, 0]
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + chunk("IHDR", ihdr) + chunk("IDAT", []) + chunk("IEND", [])
    }

    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }

    /// A 24-bit BMP (BITMAPINFOHEADER), `rows` bottom-up, each RGB triples without padding.
    static func bitmap(width: Int, height: Int, rows: [[UInt8]]) -> [UInt8] {
        let stride = (24 * width + 31) / 32 * 4
        var pixels: [UInt8] = []
        for row in rows {
            for x in 0..<width { pixels += [row[x * 3 + 2], row[x * 3 + 1], row[x * 3]] }
            pixels += [UInt8](repeating: 0, count: stride - width * 3)
        }
        let header = Array("BM".utf8) + le32(54 + pixels.count) + le32(0) + le32(54)
        let info = le32(40) + le32(width) + le32(height) + [1, 0, 24, 0] + le32(0) + le32(pixels.count) + le32(2835) + le32(2835) + le32(0) + le32(0)
        return header + info + pixels
    }

    /// CPU seconds this process has used (all threads: libvips' worker included).
    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        let user = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
        let system = Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        return user + system
    }
}
