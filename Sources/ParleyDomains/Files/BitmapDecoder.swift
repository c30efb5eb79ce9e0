import CVips

/// Reads the BMP files phones and old editors still produce (uncompressed 8-bit palette, 24-bit and 32-bit pixels)
/// into a libvips image. libvips reads BMP only through ImageMagick, a loader it marks untrusted and that
/// `parley_vips_init` blocks; these few layouts are simple enough to read here, and anything else (RLE, 16-bit, the
/// OS/2 header) is refused as not decodable.
enum BitmapDecoder {
    static func decode(_ raw: UnsafeRawBufferPointer, maxPixels: Int64) throws -> VipsHandle {
        func fail(_ why: String) -> ImageDerivationError { .cannotDecode("the BMP image does not decode: \(why)") }
        func u16(_ at: Int) -> Int { Int(raw[at]) | Int(raw[at + 1]) << 8 }
        func u32(_ at: Int) -> Int { u16(at) | u16(at + 2) << 16 }
        guard raw.count >= 54 else { throw fail("the header is truncated") }
        let pixelOffset = u32(10)
        let headerSize = u32(14)
        guard headerSize >= 40 else { throw fail("the OS/2 header is not read") }
        let width = Int64(Int32(truncatingIfNeeded: u32(18)))
        let signedHeight = Int64(Int32(truncatingIfNeeded: u32(22)))
        let height = abs(signedHeight)
        guard width > 0, height > 0 else { throw fail("the size is \(width)×\(signedHeight)") }
        guard width * height <= maxPixels else {
            throw ImageDerivationError.overMaxPixels("the image is \(width)×\(height) pixels, over image_max_pixels (\(maxPixels))")
        }
        let bitsPerPixel = u16(28)
        let compression = u32(30)
        // Channel masks: 0 means none. BI_RGB's 32-bit pixels are BGRx (the fourth byte unused); BI_BITFIELDS gives
        // byte-aligned masks after a 40-byte header or inside a larger one (the alpha mask only in the larger ones).
        var masks = [0x00FF_0000, 0x0000_FF00, 0x0000_00FF, 0]
        if compression == 3 {
            guard bitsPerPixel == 32, raw.count >= 14 + max(headerSize, 52) else { throw fail("the channel masks are not read") }
            masks = [u32(54), u32(58), u32(62), headerSize >= 56 ? u32(66) : 0]
        } else if compression != 0 {
            throw fail("compression \(compression) is not read")
        }
        guard [8, 24, 32].contains(bitsPerPixel) else { throw fail("\(bitsPerPixel)-bit pixels are not read") }
        let shifts = try masks.map { mask -> Int in
            if mask == 0 { return -1 }
            guard let shift = [0, 8, 16, 24].first(where: { mask == 0xFF << $0 }) else { throw fail("mask \(mask) is not a byte") }
            return shift
        }
        var palette: [[UInt8]] = []
        if bitsPerPixel == 8 {
            let used = u32(46)
            let count = used == 0 ? 256 : min(used, 256)
            let start = 14 + headerSize
            guard raw.count >= start + count * 4 else { throw fail("the palette is truncated") }
            palette = (0..<count).map { [raw[start + $0 * 4 + 2], raw[start + $0 * 4 + 1], raw[start + $0 * 4]] }
        }
        let w = Int(width)
        let h = Int(height)
        let stride = (bitsPerPixel * w + 31) / 32 * 4
        guard pixelOffset >= 54, raw.count >= pixelOffset + stride * h else { throw fail("the pixels are truncated") }
        let bands = shifts[3] >= 0 ? 4 : 3
        var pixels = [UInt8](repeating: 0, count: w * h * bands)
        for y in 0..<h {
            // Rows are stored bottom-up unless the height is negative.
            let row = pixelOffset + (signedHeight > 0 ? h - 1 - y : y) * stride
            for x in 0..<w {
                let out = (y * w + x) * bands
                switch bitsPerPixel {
                case 8:
                    let index = Int(raw[row + x])
                    guard index < palette.count else { throw fail("a palette index is out of range") }
                    pixels[out] = palette[index][0]
                    pixels[out + 1] = palette[index][1]
                    pixels[out + 2] = palette[index][2]
                case 24:
                    pixels[out] = raw[row + x * 3 + 2]
                    pixels[out + 1] = raw[row + x * 3 + 1]
                    pixels[out + 2] = raw[row + x * 3]
                default:
                    let value = u32(row + x * 4)
                    for band in 0..<bands {
                        pixels[out + band] = UInt8(truncatingIfNeeded: value >> shifts[band])
                    }
                }
            }
        }
        let image = pixels.withUnsafeBytes {
            vips_image_new_from_memory_copy($0.baseAddress, $0.count, Int32(w), Int32(h), Int32(bands), VIPS_FORMAT_UCHAR)
        }
        guard let image else { throw fail(Libvips.lastError()) }
        image.pointee.Type = VIPS_INTERPRETATION_sRGB
        return VipsHandle(image)
    }
}
