import CVips

/// Decoded pixels, interleaved, 8 bits per sample.
public struct Pixels: Sendable {
    public let width: Int
    public let height: Int
    public let bands: Int
    public let samples: [UInt8]

    /// The samples of the pixel at (x, y).
    public subscript(x: Int, y: Int) -> [UInt8] {
        let start = (y * width + x) * bands
        return Array(samples[start..<start + bands])
    }

    /// The mean of band `band` over a rectangle (the whole image by default).
    public func mean(band: Int, x: Int = 0, y: Int = 0, width w: Int? = nil, height h: Int? = nil) -> Double {
        let w = w ?? width - x
        let h = h ?? height - y
        guard w > 0, h > 0 else { return 0 }
        var total = 0
        for row in y..<y + h {
            var index = (row * width + x) * bands + band
            for _ in 0..<w {
                total += Int(samples[index])
                index += bands
            }
        }
        return Double(total) / Double(w * h)
    }
}

extension VipsImage {
    /// Computes every pixel and copies them out (8-bit images only). For tests and previews
    /// of small images.
    public func pixels() throws -> Pixels {
        let image = try castToUChar()
        var size = 0
        guard let memory = vips_image_write_to_memory(image.pointer, &size) else {
            throw VipsError.take("write_to_memory", context: summary)
        }
        defer { g_free(memory) }
        let samples = Array(UnsafeRawBufferPointer(start: memory, count: size))
        return Pixels(width: image.width, height: image.height, bands: image.bands, samples: samples)
    }

    /// The mean of all samples of all bands.
    public func average() throws -> Double {
        var value = 0.0
        guard ip_avg(pointer, &value) == 0 else { throw VipsError.take("avg", context: summary) }
        return value
    }

    /// The standard deviation of all samples.
    public func deviation() throws -> Double {
        var value = 0.0
        guard ip_deviate(pointer, &value) == 0 else { throw VipsError.take("deviate", context: summary) }
        return value
    }
}
