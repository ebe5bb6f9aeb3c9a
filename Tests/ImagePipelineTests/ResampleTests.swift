import ImagePipelineTesting
import Testing

@testable import PipelineKit
@testable import VipsKit

/// imgpipe's own halving and lanczos3 reduction of 8-bit pictures in memory (CResample:
/// `halved`, `reducedInMemory`), against libvips computing the same from the same samples.
/// A picture that is not in memory (here the output of a `linear` that changes nothing,
/// which libvips computes lazily) still goes through libvips, and is the reference.
@Suite("Resampling in memory")
struct ResampleTests {
    /// Samples that use the whole range and change from one pixel to the next, with runs
    /// of 0 and 255 (where lanczos3's lobes overshoot and the result must clip): every tap of
    /// a mask and every rounding shows.
    static func noise(width: Int, height: Int, bands: Int, seed: UInt64) throws -> VipsImage {
        var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
        let bytes = (0..<width * height * bands).map { index -> UInt8 in
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            switch (index / (bands * 5)) % 7 {
            case 0: return 0
            case 1: return 255
            default: return UInt8(truncatingIfNeeded: state >> 24)
            }
        }
        return try VipsImage.fromPixels(bytes, width: width, height: height, bands: bands)
    }

    /// How many samples differ (all of them when the sizes do).
    static func differing(_ a: Pixels, _ b: Pixels) -> Int {
        guard a.samples.count == b.samples.count else { return max(a.samples.count, b.samples.count) }
        return zip(a.samples, b.samples).count { $0 != $1 }
    }

    /// Pixel (x, y) moved to (y, x), as a new picture in memory.
    static func transposed(_ image: VipsImage) throws -> VipsImage {
        try transposed(image.pixels())
    }

    static func transposed(_ pixels: Pixels) throws -> VipsImage {
        let (w, h, b) = (pixels.width, pixels.height, pixels.bands)
        var turned = [UInt8](repeating: 0, count: pixels.samples.count)
        for y in 0..<h {
            for x in 0..<w {
                for band in 0..<b { turned[(x * h + y) * b + band] = pixels.samples[(y * w + x) * b + band] }
            }
        }
        return try VipsImage.fromPixels(turned, width: h, height: w, bands: b)
    }

    /// The same picture, computed by libvips when read (not in memory).
    static func lazy(_ image: VipsImage) throws -> VipsImage {
        try image.linear([1], [0], clipToByte: true)
    }

    /// Widths and heights before and after, and bands: factors from just over 1 to just
    /// under 4 (from 4 on, libvips starts with a box shrink and does the rest), odd sizes,
    /// 1 to 4 bands, pictures narrower than a mask.
    static let acrossCases: [(Int, Int, Int, Int)] = [
        (1024, 9, 3, 640), (801, 12, 1, 401), (333, 7, 4, 331), (97, 13, 2, 25),
        (1000, 5, 3, 999), (641, 3, 3, 320), (13, 6, 3, 5), (4, 4, 1, 3), (300, 150, 3, 199),
    ]

    /// Across, libvips 8.14 has only scalar code (`reduceh`): the samples are libvips'
    /// exactly.
    @Test(arguments: acrossCases)
    func aReductionAcrossGivesLibvipsSamples(width: Int, height: Int, bands: Int, outWidth: Int) throws {
        let image = try Self.noise(width: width, height: height, bands: bands, seed: UInt64(width * 31 + bands))
        let scale = Double(outWidth) / Double(width)
        let ours = try image.reducedInMemory(horizontal: scale, vertical: 1).pixels()
        let libvips = try Self.lazy(image).resized(horizontal: scale, vertical: 1).pixels()
        #expect((ours.width, ours.height, ours.bands) == (outWidth, height, bands))
        #expect((ours.width, ours.height) == (libvips.width, libvips.height))
        #expect(Self.differing(ours, libvips) == 0)
    }

    /// Down, libvips' vector code (on in imgpipe) keeps fewer bits of the mask than its
    /// scalar code. The scalar arithmetic down is the arithmetic across on the transposed
    /// picture: our reduction down equals libvips' across on the transposed picture.
    @Test(arguments: acrossCases)
    func aReductionDownGivesLibvipsScalarSamples(height: Int, width: Int, bands: Int, outHeight: Int) throws {
        let image = try Self.noise(width: width, height: height, bands: bands, seed: UInt64(height * 17 + bands))
        let scale = Double(outHeight) / Double(height)
        let ours = try image.reducedInMemory(horizontal: 1, vertical: scale).pixels()
        #expect((ours.width, ours.height, ours.bands) == (width, outHeight, bands))
        // The transposed picture made as the pictures across are (libvips restarts its sums
        // at each region it computes, and cuts a picture into regions by what it is made
        // from and what reads it).
        let across = try Self.lazy(Self.transposed(image)).resized(horizontal: scale, vertical: 1).pixels()
        #expect((across.width, across.height) == (outHeight, width))
        #expect(Self.differing(ours, try Self.transposed(across).pixels()) == 0)
    }

    /// Both ways at once: down, then across, with 8-bit rounding between, as libvips. On
    /// this smooth synthetic photo, within 3 levels of libvips with its vector code (on),
    /// which rounds its masks coarser (on real photos single samples differ by up to about
    /// 12 levels, the mean by a fraction of one).
    @Test(arguments: [
        (1024, 768, 3, 640, 480), (1600, 1200, 3, 1280, 960), (800, 600, 3, 640, 480),
        (1001, 751, 3, 641, 481), (31, 29, 3, 9, 8),
    ])
    func aReductionBothWaysIsBothPasses(width: Int, height: Int, bands: Int, outWidth: Int, outHeight: Int) throws {
        let noise = try Self.noise(width: width, height: height, bands: bands, seed: UInt64(width))
        let (h, v) = (Double(outWidth) / Double(width), Double(outHeight) / Double(height))
        let both = try noise.reducedInMemory(horizontal: h, vertical: v).pixels()
        let steps = try noise.reducedInMemory(horizontal: 1, vertical: v).reducedInMemory(horizontal: h, vertical: 1).pixels()
        #expect((both.width, both.height) == (outWidth, outHeight))
        #expect(Self.differing(both, steps) == 0)

        let photo = try ImageFixtures.photo(width: width, height: height, seed: width).materialized()
        let ours = try photo.reducedInMemory(horizontal: h, vertical: v).pixels()
        let libvips = try Self.lazy(photo).resized(horizontal: h, vertical: v).pixels()
        let gaps = zip(ours.samples, libvips.samples).map { abs(Int($0) - Int($1)) }
        #expect(ours.samples.count == libvips.samples.count)
        #expect((gaps.max() ?? 0) <= 3, "worst \(gaps.max() ?? 0)")
        #expect(Double(gaps.reduce(0, +)) / Double(max(1, gaps.count)) < 0.5)
        // `resized` is libvips' own also for a picture in memory (a pipeline's steps, which
        // `dry-run` holds in memory, come out as `run` writes them).
        #expect(Self.differing(try photo.resized(horizontal: h, vertical: v).pixels(), libvips) == 0)
        // The metadata an output keeps from its input (here the EXIF orientation).
        #expect(try photo.settingOrientation(6).materialized().reducedInMemory(horizontal: h, vertical: v).orientation == 6)
    }

    /// Halving in memory gives libvips' bilinear samples at the blocks' centres, which
    /// are the rounded 2×2 averages; a last odd row or column is left out.
    @Test(arguments: [(1280, 960, 3), (1601, 1201, 3), (7, 5, 1), (9, 3, 4), (2, 2, 2), (640, 481, 3)])
    func halvingGivesLibvipsSamples(width: Int, height: Int, bands: Int) throws {
        let image = try Self.noise(width: width, height: height, bands: bands, seed: UInt64(height))
        let ours = try image.halved().pixels()
        let libvips = try Self.lazy(image).halved().pixels()
        #expect((ours.width, ours.height, ours.bands) == (width / 2, height / 2, bands))
        #expect(Self.differing(ours, libvips) == 0)
    }

    /// JPEGs fitted into boxes: sizes where the thumbnail decodes at 1/1, 1/2, 1/4 and 1/8,
    /// odd sizes, thin pictures, and grey.
    static let fitCases: [(Int, Int, Int, Bool)] = [
        (1600, 1200, 256, false), (1280, 960, 256, false), (1024, 768, 256, false), (801, 601, 256, false),
        (640, 480, 256, false), (4100, 700, 256, false), (3000, 200, 300, false), (700, 500, 99, true),
        (333, 1000, 64, true),
    ]

    /// A JPEG's leading `fit` is made as `vips_thumbnail` makes it (the same DCT-scaled load,
    /// the same size), with the resize done by imgpipe's own code: its samples within 4
    /// levels of libvips' thumbnail (whose vector code keeps fewer bits of the mask) and
    /// well under one level apart on average.
    @Test(arguments: fitCases)
    func aJPEGsFitIsTheThumbnailsWithOurResize(width: Int, height: Int, box: Int, grey: Bool) throws {
        var picture = try ImageFixtures.photo(width: width, height: height, seed: width + height)
        if grey { picture = try picture.toGrey() }
        let data = try picture.encoded(.jpeg(quality: 90, progressive: false, strip: true))
        let header = try VipsImage.open(data: data, failOn: .warning)
        let ours = try #require(
            try ImageProcessor.reducedJPEG(data: data, header: header, box: (box, box), enlarge: false)
        ).pixels()
        let libvips = try VipsImage.thumbnail(
            data: data, width: box, height: box, size: .down, autorotate: false, failOn: .warning
        ).pixels()
        #expect((ours.width, ours.height, ours.bands) == (libvips.width, libvips.height, libvips.bands))
        let expected = BoxGeometry.thumbnailFit(
            width: width, height: height, box: (box, box), enlarge: false, jpeg: true)
        #expect((ours.width, ours.height) == (expected.width, expected.height))
        let apart = zip(ours.samples, libvips.samples).map { abs(Int($0) - Int($1)) }
        #expect(apart.count == libvips.samples.count && (apart.max() ?? 0) <= 4)
        #expect(Double(apart.reduce(0, +)) / Double(max(1, apart.count)) < 0.5)
    }

    /// What that code does not make as libvips would is left to `vips_thumbnail`: an
    /// enlargement, a picture already inside the box, and a reduction that is still 4× or
    /// more after the 1/8 load (libvips starts it with a box shrink). So is a fit whose load
    /// and result together take more than the 16 MiB of every item's memory estimate that
    /// no decoder claims (a load of 3000×2000 at 1/1, fitted to 1200), which the thumbnail
    /// streams.
    @Test func aFitOurCodeDoesNotMakeIsLeftToTheThumbnail() throws {
        let cases = [(200, 100, 256, true), (200, 100, 256, false), (10000, 100, 256, false), (3000, 2000, 1200, false)]
        for (width, height, box, enlarge) in cases {
            let data = try ImageFixtures.photo(width: width, height: height).encoded(
                .jpeg(quality: 90, progressive: false, strip: true))
            let header = try VipsImage.open(data: data, failOn: .warning)
            #expect(
                try ImageProcessor.reducedJPEG(data: data, header: header, box: (box, box), enlarge: enlarge) == nil,
                "\(width)×\(height) into \(box)")
        }
    }
}
