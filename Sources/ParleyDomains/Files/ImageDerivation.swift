import CParleyVips
import CVips

/// The image formats an upload may be, told apart by their first bytes: the file name and the client's Content-Type
/// are the client's word, and a loader chosen from them would parse whatever the bytes really are.
public enum ImageFormat: String, Sendable, CaseIterable {
    case jpeg, png, gif, bmp, tiff, webp, heic

    /// How many leading bytes `sniff` needs (HEIC's brand ends at byte 12; BMP's header size at byte 18).
    public static let sniffLength = 18

    /// The format the magic number at the start of a file announces, or nil when it announces none of them.
    public static func sniff(_ firstBytes: [UInt8]) -> ImageFormat? {
        let b = firstBytes
        func starts(_ magic: [UInt8], at offset: Int = 0) -> Bool {
            b.count >= offset + magic.count && Array(b[offset..<offset + magic.count]) == magic
        }
        if starts([0xFF, 0xD8, 0xFF]) { return .jpeg }
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .png }
        if starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8)) { return .gif }
        if starts(Array("II".utf8) + [0x2A, 0x00]) || starts(Array("MM".utf8) + [0x00, 0x2A]) { return .tiff }
        if starts(Array("RIFF".utf8)) && starts(Array("WEBP".utf8), at: 8) { return .webp }
        if starts(Array("ftyp".utf8), at: 4) && b.count >= 12,
            let brand = String(validating: b[8..<12], as: UTF8.self),
            ["heic", "heix", "hevc", "hevx", "heim", "heis", "mif1", "msf1"].contains(brand)
        {
            return .heic
        }
        // "BM" alone is two letters of many text files: the header size after it must be one a BMP writer uses.
        if starts(Array("BM".utf8)) && b.count >= 18 {
            let headerSize = Int(b[14]) | Int(b[15]) << 8 | Int(b[16]) << 16 | Int(b[17]) << 24
            if [12, 40, 52, 56, 64, 108, 124].contains(headerSize) { return .bmp }
        }
        return nil
    }

    /// The libvips loader that must have opened a file of this format (`vips-loader`): a file whose magic number
    /// says PNG but that some other loader took is refused rather than parsed by a loader nobody chose.
    var vipsLoader: String? {
        switch self {
        case .jpeg: return "jpegload_buffer"
        case .png: return "pngload_buffer"
        case .gif: return "gifload_buffer"
        case .tiff: return "tiffload_buffer"
        case .webp: return "webpload_buffer"
        case .heic: return "heifload_buffer"
        case .bmp: return nil  // libvips reads BMP only through ImageMagick; BitmapDecoder reads it instead
        }
    }
}

/// Why an upload could not be derived; the file routes answer each with its API error.
public enum ImageDerivationError: Error, Equatable, Sendable {
    /// The header declares more pixels than `image_max_pixels` (422 `6000210`): refused before any pixel is
    /// allocated, so a small file declaring a huge image (a decompression bomb) costs nothing.
    case overMaxPixels(String)
    /// The magic number names a known format but the file does not decode: truncated, damaged, or a variant the
    /// decoders do not read (422 `6000210`).
    case cannotDecode(String)
    /// The first bytes are no image format Parley reads (422 `6000213`).
    case notAnImage(String)

    public var message: String {
        switch self {
        case .overMaxPixels(let message), .cannotDecode(let message), .notAnImage(let message): return message
        }
    }
}

/// One encoded image: the bytes served and what a client needs to lay it out before they arrive.
public struct DerivedVariant: Sendable, Equatable {
    public let width: Int
    public let height: Int
    public let bytes: [UInt8]
    /// `image/jpeg` or `image/png`.
    public let mimeType: String
}

/// What an uploaded image becomes: the original re-encoded without its metadata, and two smaller copies.
public struct DerivedImage: Sendable, Equatable {
    /// The source's format, from its magic number.
    public let sourceFormat: ImageFormat
    /// The original upright (its EXIF orientation applied), in sRGB, with every metadata block removed.
    public let original: DerivedVariant
    /// Shorter side 720 px (never enlarged).
    public let large: DerivedVariant
    /// Shorter side 198 px (never enlarged).
    public let thumbnail: DerivedVariant
    /// The upright original's size.
    public var width: Int { original.width }
    public var height: Int { original.height }
}

/// Derives an upload's images with libvips.
///
/// The output format rule: JPEG, unless the decoded image has transparency (an alpha channel with at least one pixel
/// below opaque), then PNG, for the original and both smaller copies alike. So a JPEG stays JPEG; PNG, GIF, BMP,
/// TIFF, WebP and HEIC become PNG when they are transparent and JPEG otherwise (a PNG screenshot becomes a JPEG, and
/// an opaque alpha channel, which every GIF decodes with, is dropped rather than costing a PNG). Re-encoding, rather
/// than serving the uploaded bytes, is what removes EXIF (GPS positions among it), XMP, IPTC and ICC blocks, and
/// what makes every byte served one the decoder produced.
///
/// Cost: the source is decoded once, fully, into memory (the original needs every pixel), upright and in sRGB; the
/// large copy is scaled from that decoded image and the thumbnail from the large copy, so neither decodes again
/// (a second, shrink-on-load decode of a JPEG for the large copy costs more than scaling the decoded pixels, since
/// most of a decode is reading the compressed data, which shrink-on-load does not skip). For a 12-megapixel JPEG
/// the decode is about half the CPU, the original's encoding and the scaling a quarter each.
public enum ImageDerivation {
    /// Shorter side of the large copy.
    public static let largeShortSide = 720
    /// Shorter side of the thumbnail.
    public static let thumbnailShortSide = 198
    /// JPEG quality of the re-encoded original: high, since it stands in for the upload.
    static let originalQuality: Int32 = 90
    /// JPEG quality of the smaller copies, which are looked at small.
    static let derivedQuality: Int32 = 82

    /// Derives the original, large and thumbnail images of `source` (an upload's whole content); `maxPixels` is the
    /// app's `image_max_pixels`. Synchronous and CPU-bound (one libvips worker thread): call it off the event loop.
    public static func derive(source: [UInt8], maxPixels: Int64) throws -> DerivedImage {
        guard let format = ImageFormat.sniff(Array(source.prefix(ImageFormat.sniffLength))) else {
            throw ImageDerivationError.notAnImage("the content is not a JPEG, PNG, GIF, BMP, TIFF, WebP or HEIC image")
        }
        try Libvips.ready()
        return try source.withUnsafeBytes { raw in
            let decoded = try decode(raw, format: format, maxPixels: maxPixels)
            let transparent = try hasTransparency(decoded)
            // An opaque alpha channel is dropped so the image saves as JPEG (bands [0, n - 1)).
            let opaque =
                transparent || vips_image_hasalpha(decoded.pointer) == 0
                ? decoded : try VipsHandle { parley_vips_extract_band(decoded.pointer, $0, 0, vips_image_get_bands(decoded.pointer) - 1) }
            let original = try encode(opaque, transparent: transparent, quality: originalQuality)
            let largeImage = try shrink(opaque, shortSide: largeShortSide, transparent: transparent)
            // In memory so the thumbnail reads the large copy's pixels rather than scaling the original again.
            let largeDecoded = try VipsHandle(copyingToMemory: largeImage)
            let large = try encode(largeDecoded, transparent: transparent, quality: derivedQuality)
            let thumbnailImage = try shrink(largeDecoded, shortSide: thumbnailShortSide, transparent: transparent)
            let thumbnail = try encode(thumbnailImage, transparent: transparent, quality: derivedQuality)
            return DerivedImage(sourceFormat: format, original: original, large: large, thumbnail: thumbnail)
        }
    }

    /// The source's pixels in memory, upright and in sRGB (or grey), decoded once; the header is checked first.
    static func decode(_ raw: UnsafeRawBufferPointer, format: ImageFormat, maxPixels: Int64) throws -> VipsHandle {
        if format == .bmp {
            return try BitmapDecoder.decode(raw, maxPixels: maxPixels)
        }
        guard let base = raw.baseAddress, let opened = parley_vips_open_buffer(base, raw.count) else {
            throw ImageDerivationError.cannotDecode("the \(format.rawValue) header does not decode: \(Libvips.lastError())")
        }
        // Only the header has been read so far (sequential access is lazy): the size is checked before any decoding.
        let header = VipsHandle(opened)
        var loader: UnsafePointer<CChar>?
        guard vips_image_get_string(header.pointer, "vips-loader", &loader) == 0, let loader, String(cString: loader) == format.vipsLoader
        else {
            throw ImageDerivationError.cannotDecode("the file is not a readable \(format.rawValue) image")
        }
        // One page: GIF, TIFF and HEIC load their first frame, page or primary image only, so that is what is decoded.
        let width = Int64(vips_image_get_width(header.pointer))
        let height = Int64(vips_image_get_height(header.pointer))
        guard width * height <= maxPixels else {
            throw ImageDerivationError.overMaxPixels("the image is \(width)×\(height) pixels, over image_max_pixels (\(maxPixels))")
        }
        // A rotation reads the source out of order, which a sequential decode cannot do past its small line cache
        // ("out of order read"): a rotated source is decoded into memory first.
        let source = vips_image_get_orientation(header.pointer) > 1 ? try VipsHandle(copyingToMemory: header) : header
        var image = try VipsHandle { parley_vips_autorot(source.pointer, $0) }
        image = try sRGB(image)
        return try VipsHandle(copyingToMemory: image)
    }

    /// The image in sRGB (grey stays grey): through its ICC profile when it has one, by formula otherwise (CMYK,
    /// 16-bit, Lab); the profile is then removed, since its pixels no longer need it.
    static func sRGB(_ image: VipsHandle) throws -> VipsHandle {
        if vips_image_get_typeof(image.pointer, "icc-profile-data") != 0 {
            let converted = try VipsHandle { parley_vips_icc_to_srgb(image.pointer, $0) }
            _ = vips_image_remove(converted.pointer, "icc-profile-data")
            return converted
        }
        let interpretation = vips_image_get_interpretation(image.pointer)
        let is8Bit = vips_image_get_format(image.pointer) == VIPS_FORMAT_UCHAR
        if is8Bit && (interpretation == VIPS_INTERPRETATION_sRGB || interpretation == VIPS_INTERPRETATION_B_W) {
            return image
        }
        let grey =
            interpretation == VIPS_INTERPRETATION_B_W || interpretation == VIPS_INTERPRETATION_GREY16
            || (interpretation == VIPS_INTERPRETATION_MULTIBAND && vips_image_get_bands(image.pointer) <= 2)
        return try VipsHandle { parley_vips_colourspace(image.pointer, $0, grey ? VIPS_INTERPRETATION_B_W : VIPS_INTERPRETATION_sRGB) }
    }

    /// Whether the image has an alpha channel with at least one pixel below opaque (a scan of the decoded alpha band).
    static func hasTransparency(_ image: VipsHandle) throws -> Bool {
        guard vips_image_hasalpha(image.pointer) != 0 else { return false }
        let alpha = try VipsHandle { parley_vips_extract_band(image.pointer, $0, vips_image_get_bands(image.pointer) - 1, 1) }
        var minimum = 0.0
        guard parley_vips_min(alpha.pointer, &minimum) == 0 else {
            throw ImageDerivationError.cannotDecode("the alpha channel does not read: \(Libvips.lastError())")
        }
        let opaqueValue = vips_image_get_format(image.pointer) == VIPS_FORMAT_USHORT ? 65535.0 : 255.0
        return minimum < opaqueValue
    }

    /// The image scaled so its shorter side is `shortSide`, or unchanged when it is that small already (never
    /// enlarged). A transparent image goes through libvips' thumbnail, which premultiplies alpha while scaling; an
    /// opaque one through a plain resize, which is the cheaper of the two on a large photograph.
    static func shrink(_ image: VipsHandle, shortSide: Int, transparent: Bool) throws -> VipsHandle {
        let width = Int(vips_image_get_width(image.pointer))
        let height = Int(vips_image_get_height(image.pointer))
        guard min(width, height) > shortSide else { return image }
        if transparent {
            // libvips fits an image in a box: the box is unbounded along the longer side.
            let side = Int32(shortSide)
            let unbounded = Int32(VIPS_MAX_COORD)
            let portrait = width <= height
            return try VipsHandle {
                parley_vips_thumbnail_image(image.pointer, $0, portrait ? side : unbounded, portrait ? unbounded : side)
            }
        }
        return try VipsHandle { parley_vips_resize(image.pointer, $0, Double(shortSide) / Double(min(width, height))) }
    }

    /// The image saved as PNG (transparent) or JPEG, with every metadata block stripped.
    static func encode(_ image: VipsHandle, transparent: Bool, quality: Int32) throws -> DerivedVariant {
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        let status =
            transparent
            ? parley_vips_png_buffer(image.pointer, &buffer, &length, 1)
            : parley_vips_jpeg_buffer(image.pointer, &buffer, &length, quality, 1)
        defer { g_free(buffer) }
        guard status == 0, let buffer else {
            throw ImageDerivationError.cannotDecode("the image does not decode: \(Libvips.lastError())")
        }
        return DerivedVariant(
            width: Int(vips_image_get_width(image.pointer)), height: Int(vips_image_get_height(image.pointer)),
            bytes: Array(UnsafeRawBufferPointer(start: buffer, count: length)), mimeType: transparent ? "image/png" : "image/jpeg")
    }
}

/// libvips, initialised once per process.
enum Libvips {
    /// Swift runs a static's initialiser once, whatever the number of threads asking (libvips' own init is not
    /// meant to race); the cache, concurrency and untrusted-loader settings are in `parley_vips_init`.
    private static let initialised: Bool = parley_vips_init() == 0

    static func ready() throws {
        guard initialised else { throw ImageDerivationError.cannotDecode("libvips did not initialise") }
    }

    /// libvips' error text for the failure just reported, cleared so the next failure reports only its own.
    static func lastError() -> String {
        let text = String(cString: vips_error_buffer()).split(separator: "\n").joined(separator: "; ")
        vips_error_clear()
        return text
    }
}

/// One reference to a libvips image, released when the handle goes: every path out of a derivation, the throwing
/// ones included, drops what it made.
final class VipsHandle {
    let pointer: UnsafeMutablePointer<VipsImage>

    init(_ pointer: UnsafeMutablePointer<VipsImage>) {
        self.pointer = pointer
    }

    /// The output of a libvips operation that writes an image to its argument and returns 0 on success; a failure
    /// there is the source failing to decode (pixels are only decoded when an operation asks for them).
    convenience init(_ operation: (UnsafeMutablePointer<UnsafeMutablePointer<VipsImage>?>) -> Int32) throws {
        var out: UnsafeMutablePointer<VipsImage>?
        let status = operation(&out)
        guard status == 0, let out else {
            if let out { g_object_unref(out) }
            throw ImageDerivationError.cannotDecode("the image does not decode: \(Libvips.lastError())")
        }
        self.init(out)
    }

    /// The image's pixels computed into memory: the one place its pipeline runs, so a damaged file fails here.
    convenience init(copyingToMemory image: VipsHandle) throws {
        guard let copy = vips_image_copy_memory(image.pointer) else {
            throw ImageDerivationError.cannotDecode("the image does not decode: \(Libvips.lastError())")
        }
        self.init(copy)
    }

    deinit {
        g_object_unref(pointer)
    }
}
