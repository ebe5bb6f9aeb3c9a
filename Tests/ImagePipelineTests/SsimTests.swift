import Foundation
import ImagePipelineTesting
import Testing
import VipsKit

@testable import PipelineKit

/// `VipsImage.structuralSimilarity(to:)` judged on pixels: identical pictures, flat
/// pictures (where SSIM has a closed form), damaged copies and JPEG qualities.
@Suite("SSIM")
struct SsimTests {
    /// Runs `body` and ends the thread's libvips work, as every libvips caller must.
    func withVips<T>(_ body: () throws -> T) rethrows -> T {
        defer { VipsRuntime.endThreadWork() }
        return try body()
    }

    func flat(_ value: UInt8, width: Int = 64, height: Int = 48) throws -> VipsImage {
        try VipsImage.fromPixels([UInt8](repeating: value, count: width * height * 3), width: width, height: height, bands: 3)
            .labelled(.srgb)
    }

    @Test func identicalImagesScoreOne() throws {
        try withVips {
            let photo = try ImageFixtures.photo(width: 200, height: 150)
            #expect(abs(try photo.structuralSimilarity(to: photo) - 1) < 1e-6)
            // A lossless round trip is still the same picture.
            let copy = try VipsImage.open(data: try photo.encoded(.png(compression: 6, strip: true)))
            #expect(abs(try copy.structuralSimilarity(to: photo) - 1) < 1e-6)
        }
    }

    /// Two flat images have no variance, so SSIM is (2ab + C1) / (a² + b² + C1) everywhere:
    /// this checks the constants and the luminance term.
    @Test func flatImagesScoreTheClosedForm() throws {
        try withVips {
            let (a, b) = (100.0, 150.0)
            let c1 = (0.01 * 255) * (0.01 * 255)
            let expected = (2 * a * b + c1) / (a * a + b * b + c1)
            let score = try flat(150).structuralSimilarity(to: flat(100))
            #expect(abs(score - expected) < 1e-4, "\(score) against \(expected)")
            #expect(VipsImage.ssimC1 == c1 && VipsImage.ssimC2 == (0.03 * 255) * (0.03 * 255))
        }
    }

    @Test func blurredAndNoisedCopiesScoreClearlyLower() throws {
        try withVips {
            let photo = try ImageFixtures.quadrants(width: 160, height: 120)
            let blurred = try photo.gaussianBlurred(sigma: 6).castToUChar()
            let blurScore = try blurred.structuralSimilarity(to: photo)
            #expect(blurScore < 0.9, "blurred: \(blurScore)")

            let pixels = try photo.pixels()
            var state: UInt32 = 12345
            let noisy = pixels.samples.map { sample -> UInt8 in
                state ^= state << 13
                state ^= state >> 17
                state ^= state << 5
                return UInt8(clamping: Int(sample) + Int(state % 121) - 60)
            }
            let noised = try VipsImage.fromPixels(noisy, width: pixels.width, height: pixels.height, bands: 3).labelled(.srgb)
            let noiseScore = try noised.structuralSimilarity(to: photo)
            #expect(noiseScore < 0.6, "noised: \(noiseScore)")
            // The score is symmetric.
            #expect(abs(try photo.structuralSimilarity(to: noised) - noiseScore) < 1e-9)
        }
    }

    @Test func jpegQuality95ScoresHigherThanQuality10() throws {
        try withVips {
            let photo = try ImageFixtures.photo(width: 320, height: 240, seed: 7)
            func jpeg(_ quality: Int) throws -> Double {
                let data = try photo.encoded(.jpeg(quality: quality, progressive: false, strip: true))
                return try VipsImage.open(data: data).structuralSimilarity(to: photo)
            }
            let high = try jpeg(95)
            let low = try jpeg(10)
            #expect(high > low + 0.05, "q95 \(high), q10 \(low)")
            #expect(high > 0.9 && high < 1)
        }
    }

    @Test func imagesOfDifferentSizesAreRefused() throws {
        defer { VipsRuntime.endThreadWork() }
        let narrow = try flat(10, width: 10, height: 10)
        let wide = try flat(10, width: 12, height: 10)
        #expect(throws: VipsError.self) { try narrow.structuralSimilarity(to: wide) }
    }
}
