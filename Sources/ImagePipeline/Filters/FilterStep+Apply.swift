import VipsKit

extension FilterStep {
    /// Runs this step on an image. Pixels are computed later, when the output is encoded.
    func apply(to image: VipsImage) throws -> VipsImage {
        switch self {
        case .autorotate:
            guard image.orientation != 1 else { return image }
            return try image.materialized().autorotated()
        case let .fit(width, height, enlarge):
            let size = BoxGeometry.fit(width: image.width, height: image.height, box: (width, height), enlarge: enlarge)
            return try image.resizedExactly(to: size)
        case let .fill(width, height, gravity):
            let cover = BoxGeometry.cover(width: image.width, height: image.height, box: (width, height))
            return try image.resizedExactly(to: cover).cropped(to: (width, height), gravity: gravity)
        case .grayscale:
            return try image.toGrey()
        }
    }
}

extension VipsImage {
    /// Resamples to exactly `size` (aspect given by the caller).
    func resizedExactly(to size: (width: Int, height: Int)) throws -> VipsImage {
        guard size.width != width || size.height != height else { return self }
        return try resized(horizontal: Double(size.width) / Double(width),
                           vertical: Double(size.height) / Double(height))
    }

    /// Crops to `size` around `gravity`; an image already that size is returned as is.
    func cropped(to size: (width: Int, height: Int), gravity: Gravity) throws -> VipsImage {
        let w = min(size.width, width)
        let h = min(size.height, height)
        guard w != width || h != height else { return self }
        switch gravity {
        case .attention: return try materialized().smartCropped(width: w, height: h, interesting: .attention)
        case .entropy: return try materialized().smartCropped(width: w, height: h, interesting: .entropy)
        default:
            let origin = gravity.offset(width: w, height: h, fullWidth: width, fullHeight: height)
            return try cropped(left: origin.x, top: origin.y, width: w, height: h)
        }
    }
}
