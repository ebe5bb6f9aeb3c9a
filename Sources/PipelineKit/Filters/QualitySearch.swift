import Foundation
import VipsKit

/// What a quality search chose for one image: the quality it was encoded at and, with an
/// SSIM target, the SSIM that quality reached (against the pixels before encoding).
public struct QualityChoice: Sendable, Equatable {
    public let quality: Int
    public let ssim: Double?

    public init(quality: Int, ssim: Double?) {
        self.quality = quality
        self.ssim = ssim
    }
}

/// Chooses one output's quality for one image (`OutputSpec.searchesQuality`):
/// - with an SSIM target, the lowest quality in `minQuality`…100 whose encoded result,
///   decoded again, reaches the target against the pixels before encoding (libvips'
///   luminance, `SimilarityReference`); 100 when none does (the SSIM then says by how much
///   it fell short);
/// - with a byte budget, the highest quality in that range whose result fits;
/// - with both, the target's quality unless the budget forbids it, then the budget's.
///
/// A search, not a scan: SSIM and size grow with the quality (nearly always; where they do
/// not, the search still returns a quality it tried and found to meet the goal, or 100),
/// so about five encodes settle a target (`lowest(reaching:)`) and seven a budget. The same pixels give the
/// same choice every time: the search depends on nothing but the image and the output.
struct QualitySearch {
    let output: OutputSpec
    static let highest = 100

    /// Encodes `image` (ready for the output's format) at the quality chosen; throws a
    /// `limit` failure when even `minQuality` does not fit the budget.
    func encode(_ image: VipsImage) throws -> (data: Data, choice: QualityChoice) {
        // Every probe encodes these pixels again: computed once.
        let picture = try image.materialized()
        var encoded: [Int: Data] = [:]
        var scores: [Int: Double] = [:]
        var reference: SimilarityReference?
        func bytes(_ quality: Int) throws -> Data {
            if let data = encoded[quality] { return data }
            var spec = output
            spec.quality = quality
            let data = try picture.encoded(ImageProcessor.encoding(of: spec))
            encoded[quality] = data
            return data
        }
        func ssim(_ quality: Int) throws -> Double {
            if let score = scores[quality] { return score }
            let encoded = try bytes(quality)
            // Scoring the encoder's own bytes: a failure here is the encoder's (or the
            // decoder's of the output format), never the input's.
            let score: Double
            do {
                if reference == nil { reference = try SimilarityReference(picture) }
                score = try reference!.similarity(of: try VipsImage.open(data: encoded))
            } catch {
                throw ItemFailure(
                    .encode, "cannot score \(output.format.rawValue) at quality \(quality): \(ImageProcessor.text(error))")
            }
            scores[quality] = score
            return score
        }
        let lowest = min(output.minQuality, Self.highest)
        if let budget = output.maxBytes {
            // A budget nothing fits is known from one encode, before any search.
            let smallest = try bytes(lowest).count
            if smallest > budget {
                throw ItemFailure(
                    .limit,
                    "the output is \(smallest) bytes at quality \(lowest) (minQuality), over maxBytes \(budget)")
            }
        }
        // Without a target, a budget's ceiling: the output's `quality` (100 unless the file
        // gave one beside `maxBytes`).
        var quality = output.ssimTarget == nil ? max(output.quality, lowest) : Self.highest
        if let target = output.ssimTarget {
            quality = try Self.lowest(reaching: target, from: lowest, ssim)
        }
        if let budget = output.maxBytes, try bytes(quality).count > budget {
            // The highest quality below the one that did not fit whose result fits.
            var low = lowest
            var high = quality - 1
            while low < high {
                let middle = (low + high + 1) / 2
                if try bytes(middle).count <= budget { low = middle } else { high = middle - 1 }
            }
            quality = low
        }
        let score = output.ssimTarget == nil ? nil : try ssim(quality)
        return (try bytes(quality), QualityChoice(quality: quality, ssim: score))
    }

    /// Where a target search starts: about the middle of where photos fitted to a web size
    /// reach SSIM 0.97 (55–95 on the bench's corpus).
    static let firstGuess = 80

    /// The lowest quality from `lowest` to `highest` whose SSIM (`ssim`) reaches `target`;
    /// `highest` when none below it does. A bracket (every quality up to `failing` falls
    /// short, `passing` reaches it) narrowed by probes until the two are neighbours: the
    /// first at `firstGuess`, then where a straight line through the bracket's two scores
    /// crosses the target, halving instead when a score is missing or the bracket has not
    /// halved in two probes (so that it never takes many small steps). The line is drawn
    /// through −log(1 − SSIM), not SSIM: for photos the loss an encoder leaves falls about
    /// exponentially with its quality, so the line lands nearer the answer (on 40 of the
    /// bench's photos at 0.97, 4.85 probes per image where the line through SSIM took 5.3;
    /// halving takes six or seven). The same answer as halving when SSIM grows with the
    /// quality.
    static func lowest(reaching target: Double, from lowest: Int, _ ssim: (Int) throws -> Double) rethrows -> Int {
        var failing = lowest - 1
        var passing = highest
        var failingScore: Double?
        var passingScore: Double?
        var next = min(max(firstGuess, lowest), highest)
        // The bracket's width before each probe: one that has not halved in two probes
        // is halved next, so the search never takes more than about twice halving's probes.
        var widths: [Int] = []
        while passing - failing > 1 {
            widths.append(passing - failing)
            let probe = min(max(next, failing + 1), passing - 1)
            let score = try ssim(probe)
            if score >= target {
                (passing, passingScore) = (probe, score)
            } else {
                (failing, failingScore) = (probe, score)
            }
            let halve = widths.count >= 2 && 2 * (passing - failing) > widths[widths.count - 2]
            // A perfect score (a flat picture) has no loss to draw a line through: halved.
            if !halve, let low = failingScore.map(loss), let high = passingScore.flatMap(lossBelowPerfect), high > low {
                let crossing = Double(failing) + (loss(target) - low) / (high - low) * Double(passing - failing)
                next = Int(crossing.rounded(.up))
            } else {
                next = (failing + passing) / 2
            }
        }
        return passing
    }

    /// −log(1 − `score`), which grows about linearly with the quality (an SSIM of 1 is
    /// taken as 1 − 10⁻⁹).
    static func loss(_ score: Double) -> Double { -log(max(1e-9, 1 - score)) }

    /// `loss`, or nil for a score within 10⁻⁶ of 1, where the line would guess too low.
    static func lossBelowPerfect(_ score: Double) -> Double? { score < 1 - 1e-6 ? loss(score) : nil }
}
