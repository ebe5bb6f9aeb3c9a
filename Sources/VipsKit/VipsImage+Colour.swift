import CVips

extension VipsImage {
    /// Converts to 8-bit sRGB, importing with the embedded ICC profile when there is one
    /// and `useEmbeddedProfile` (and with libvips' built-in CMYK profile for a CMYK file
    /// without one). Alpha is kept.
    public func toSRGB(useEmbeddedProfile: Bool = true) throws -> VipsImage {
        var image = self
        if image.isCMYK || (useEmbeddedProfile && image.hasICCProfile && !image.isGrey) {
            let fallback = image.isCMYK ? "cmyk" : "srgb"
            image = try image.derive("icc_transform") { ip_icc_to_srgb(image.pointer, &$0, fallback) }
        }
        if image.interpretation != VIPS_INTERPRETATION_sRGB || !image.isEightBit {
            image = try image.derive("colourspace") {
                ip_colourspace(image.pointer, &$0, VIPS_INTERPRETATION_sRGB)
            }
        }
        return try image.castToUChar()
    }

    /// Converts to 8-bit greyscale (`B_W`). Alpha is kept.
    public func toGrey() throws -> VipsImage {
        var image = self
        if image.isCMYK {
            image = try image.toSRGB()
        }
        if image.interpretation != VIPS_INTERPRETATION_B_W || !image.isEightBit {
            image = try image.derive("colourspace") {
                ip_colourspace(image.pointer, &$0, VIPS_INTERPRETATION_B_W)
            }
        }
        return try image.castToUChar()
    }

    /// Removes alpha by compositing over a solid background (0…255 per channel).
    public func flattened(red: Double = 255, green: Double = 255, blue: Double = 255) throws -> VipsImage {
        guard hasAlpha else { return self }
        let count: Int32 = isGrey ? 1 : 3
        let grey = (red + green + blue) / 3
        let flat = try derive("flatten") {
            count == 1 ? ip_flatten(pointer, &$0, grey, grey, grey, 1) : ip_flatten(pointer, &$0, red, green, blue, 3)
        }
        return try flat.castToUChar()
    }

    /// Casts to 8 bits per sample, clipping, keeping the interpretation.
    public func castToUChar() throws -> VipsImage {
        guard !isEightBit else { return self }
        let interpretation = self.interpretation
        let cast = try derive("cast") { ip_cast(pointer, &$0, VIPS_FORMAT_UCHAR) }
        return try cast.derive("copy") { ip_copy_interpretation(cast.pointer, &$0, interpretation) }
    }

    /// Relabels the pixels as greyscale, sRGB, CMYK, 16-bit RGB or 16-bit grey, without
    /// changing them. For building test images.
    public func labelled(_ space: ColourSpace) throws -> VipsImage {
        try derive("copy") { ip_copy_interpretation(pointer, &$0, space.vips) }
    }

    /// Bands `first ..< first + count`.
    public func extractBands(_ first: Int, count: Int = 1) throws -> VipsImage {
        try derive("extract_band") { ip_extract_band(pointer, &$0, Int32(first), Int32(count)) }
    }

    /// This image's bands followed by `other`'s.
    public func joined(with other: VipsImage) throws -> VipsImage {
        try derive("bandjoin", with: [other]) { ip_bandjoin2(pointer, other.pointer, &$0) }
    }
}

extension VipsImage {
    /// Casts to 16 bits per sample (for building 16-bit test images).
    public func castTo16Bit() throws -> VipsImage {
        try derive("cast") { ip_cast(pointer, &$0, VIPS_FORMAT_USHORT) }
    }
}
