import Foundation
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// The fingerprints of a picture (ThumbHash, perceptual hash, dominant colour) and the index
/// that finds perceptual hashes near one another, on pictures made from formulas.
@Suite("Fingerprints")
struct FingerprintTests {
    // MARK: ThumbHash

    /// A picture of the ThumbHash vectors, its pixels from integer formulas (the same in
    /// Python, where the expected hashes were computed), and its reference ThumbHash.
    struct Vector: Sendable, CustomTestStringConvertible {
        let name: String
        let width: Int
        let height: Int
        let rgba: [UInt8]
        let expected: String

        var testDescription: String { name }

        /// A picture whose pixel (x, y) is `pixel(x, y)`: red, green, blue, alpha.
        init(_ name: String, _ width: Int, _ height: Int, expected: String, pixel: (_ x: Int, _ y: Int) -> [Int]) {
            var rgba: [UInt8] = []
            for y in 0..<height {
                for x in 0..<width {
                    rgba += pixel(x, y).map { UInt8($0) }
                }
            }
            self.init(name, width, height, rgba: rgba, expected: expected)
        }

        init(_ name: String, _ width: Int, _ height: Int, rgba: [UInt8], expected: String) {
            (self.name, self.width, self.height, self.rgba, self.expected) = (name, width, height, rgba, expected)
        }
    }

    /// Bytes from a 64-bit LCG (Knuth's MMIX constants), each the top 8 bits of the next
    /// state, four to a pixel; alpha 255 when `alpha` is false (its byte is then not drawn).
    static func noise(width: Int, height: Int, seed: UInt64, alpha: Bool) -> [UInt8] {
        var state = seed
        func byte() -> UInt8 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(state >> 56)
        }
        var bytes: [UInt8] = []
        for _ in 0..<width * height {
            let (red, green, blue) = (byte(), byte(), byte())
            bytes += [red, green, blue, alpha ? byte() : 255]
        }
        return bytes
    }

    /// The vectors were made with a Python script (kept out of the repository) that draws the
    /// same pictures from the same formulas and prints each one's ThumbHash in base64, from
    /// three implementations of the reference: fast-thumbhash 1.0.0 (PyPI; PyO3 bindings of
    /// Evan Wallace's `thumbhash` Rust crate), thumbhash 0.1.2 (PyPI, pure Python), and the
    /// reference's own `rgbaToThumbHash` (evanw/thumbhash, js/thumbhash.js, package 0.1.1,
    /// commit a652ce6, run under Node 20). All three agree on every vector except:
    /// - `pixel-1x1`, `line-100x1`: the Rust crate, which computes in single precision, gives
    ///   other nibbles for the terms that are zero in exact arithmetic (a one-pixel axis);
    ///   the two double-precision implementations agree, and the vector is theirs;
    /// - `alpha-100x100`, `halfclear-64x48`, `noise-61x97` (transparency): thumbhash 0.1.2
    ///   cannot encode alpha (a TypeError); the other two agree;
    /// - `halfclear-50x40`: its alpha terms for y are zero in exact arithmetic, and the
    ///   rounding errors' signs decide their nibbles; the vector is the JavaScript
    ///   reference's, which the encoder matches by summing such terms in the reference's
    ///   order (the Rust crate differs there, thumbhash 0.1.2 cannot encode alpha).
    static let vectors: [Vector] = [
        Vector("gradient-100x75", 100, 75, expected: "2gkOHZqAh4eQiIeIiHh4iHcHCPh3") { x, y in
            [x * 255 / 99, y * 255 / 74, x * y * 255 / (99 * 74), 255]
        },
        Vector("gradient-64x100", 64, 100, expected: "2fYNdBKQd3eHiHeHeIeFfwgKeQ==") { x, y in
            [x * x * 255 / (63 * 63), (99 - y) * (x + 40) * 255 / (99 * 103), (x + 2 * y) * 255 / 261, 255]
        },
        Vector("pixel-1x1", 1, 1, expected: "Hcs6zzII9wiIh4hwj3CI+AiIgIAICIgA") { _, _ in [200, 100, 50, 255] },
        Vector("line-100x1", 100, 1, expected: "nog9Kah3d3eIiAiIq4gAiNc=") { x, _ in [x * 2, 255 - x * 2, x * x % 256, 255] },
        Vector("alpha-100x100", 100, 100, expected: "3weGJRIbcHhweIeHd3BwB/iHB2eNiHCHZw==") { x, y in
            [x * 255 / 99, y * 255 / 99, 128, 255 - ((x - 50) * (x - 50) + (y - 40) * (y - 40)) * 255 / 7200]
        },
        Vector("strip-37x5", 37, 5, expected: "2ygKMYoDVVVDh0enZ0+thYA=") { x, y in
            [(x * 7 + y * 31) % 256, (x * x * 3 + y * 5) % 256, x * y * 11 % 256, 255]
        },
        // A one-pixel checkerboard whose two colours drift with x·y.
        Vector("checker-100x100", 100, 100, expected: "4OcBFwSAd4ewh4d4h3eIeHeHCAiLgLAI") { x, y in
            (x + y) % 2 == 0
                ? [200 + x * y / 200, 230, 250 - x * y / 100, 255] : [10 + x * y / 100, 40 - x * y / 400, 30, 255]
        },
        // Alpha 0 in the left half.
        Vector("halfclear-64x48", 64, 48, expected: "4PeBBIA1h1mltaUFfJoJt0oPqHeId3iHBw==") { x, y in
            x < 32
                ? [255, 0, 0, 0]
                : [(x * 37 + y * 11) % 256, x * y * 5 % 256, (x * x + y * y * 3) % 256, 96 + x * y * 13 % 160]
        },
        Vector("halfclear-50x40", 50, 40, expected: "44iGFIxYtoXAaIdoWAystj8HqHiHiIh4CA==") { x, y in
            x < 25 ? [255, 0, 0, 0] : [x * 5, y * 6, x * y % 256, 255]
        },
        Vector(
            "noise-100x100", 100, 100, rgba: noise(width: 100, height: 100, seed: 1, alpha: false),
            expected: "HwgCBwB8B0lrqXmbhXkpy5vkl3b6wNoE"),
        Vector(
            "noise-61x97", 61, 97, rgba: noise(width: 61, height: 97, seed: 2, alpha: true),
            expected: "IAiCAwAHhTTFlbCXf5wPV7JxcamAlM0="),
    ]

    /// Each picture's ThumbHash is the reference's, byte for byte.
    @Test(arguments: vectors)
    func thumbHashMatchesTheReference(_ vector: Vector) {
        #expect(vector.rgba.count == vector.width * vector.height * 4)
        let hash = ThumbHash.encode(width: vector.width, height: vector.height, rgba: vector.rgba)
        #expect(ThumbHash.base64(hash) == vector.expected)
        #expect(ThumbHash.base64(hash).count <= 40)
    }

    /// A flat colour: every AC term is zero in exact arithmetic, so its nibbles are whatever
    /// the rounding errors make them, and the three reference implementations give three
    /// different ones (harmless: the header gives every channel a scale of 0, and a decoder
    /// multiplies the nibbles by it). The header, all a decoder uses, is the reference's
    /// (9e 9b 02 05 00, from all three), and so is the length.
    @Test func aFlatColoursHeaderIsTheReferences() {
        let rgba = [UInt8]((0..<20 * 30).flatMap { _ in [200, 120, 40, 255] as [UInt8] })
        let hash = ThumbHash.encode(width: 20, height: 30, rgba: rgba)
        #expect(Array(hash.prefix(5)) == [0x9e, 0x9b, 0x02, 0x05, 0x00])
        #expect(hash.count == 21)
        let header24 = Int(hash[0]) | Int(hash[1]) << 8 | Int(hash[2]) << 16
        let header16 = Int(hash[3]) | Int(hash[4]) << 8
        #expect((header24 >> 18) & 31 == 0, "luminance scale")
        #expect((header16 >> 3) & 63 == 0 && (header16 >> 9) & 63 == 0, "colour scales")
    }

    /// The base64 form is at most 40 characters for every picture: the longest hash (25
    /// bytes, with alpha) is 36; shapes from 1×100 to 100×1, opaque and not.
    @Test func theBase64FormFitsIn40Characters() {
        var longest = 0
        for (width, height) in [(100, 100), (1, 100), (100, 1), (100, 37), (37, 100), (1, 1), (64, 48), (99, 98)] {
            for alpha in [false, true] {
                let rgba = Self.noise(width: width, height: height, seed: UInt64(width * 1000 + height), alpha: alpha)
                let text = ThumbHash.base64(ThumbHash.encode(width: width, height: height, rgba: rgba))
                #expect(text.count <= 40, "\(width)×\(height)")
                #expect(Data(base64Encoded: text) != nil)
                longest = max(longest, text.count)
            }
        }
        #expect(longest == 36)
    }

    /// JavaScript's `Math.round`, which the reference uses: halves go up, also below zero.
    @Test func roundingIsJavaScripts() {
        #expect(ThumbHash.jsRound(2.5) == 3)
        #expect(ThumbHash.jsRound(7.5) == 8)
        #expect(ThumbHash.jsRound(-2.5) == -2)
        #expect(ThumbHash.jsRound(-2.6) == -3)
        #expect(ThumbHash.jsRound(0.49999999999999994) == 0)
        #expect(ThumbHash.jsRound(7.499999999999999) == 7)
    }

    // MARK: Perceptual hash

    static let side = PerceptualHash.gridSize

    /// A 32×32 grey picture from `value(x, y)`, clipped to 0…255.
    static func grey(_ value: (Double, Double) -> Double) -> [Double] {
        (0..<side * side).map { index in
            min(255, max(0, value(Double(index % side), Double(index / side))))
        }
    }

    /// A smooth scene: two waves and a bright blob; it reaches 255 (and is clipped) near the blob.
    static let scene = grey { x, y in
        let blob = 80 * exp(-((x - 20) * (x - 20) + (y - 9) * (y - 9)) / 40)
        return 120 + 55 * sin(0.35 * x + 0.2 * y) + 45 * cos(0.23 * y - 0.1 * x + 1) + blob
    }

    static func hash(_ grey: [Double]) -> PerceptualHash {
        PerceptualHash(grey: grey, size: side)
    }

    /// The same scene brightened by 10 (clipped at 255), with its contrast lowered by a
    /// tenth, and with noise of up to ±4 levels: a few bits at most change.
    @Test func nearCopiesAreWithinFourBits() {
        let original = Self.hash(Self.scene)
        let brighter = Self.hash(Self.scene.map { min(255, $0 + 10) })
        let flatter = Self.hash(Self.scene.map { 128 + ($0 - 128) * 0.9 })
        var random = SeededRandom(seed: 7)
        let noisy = Self.hash(Self.scene.map { min(255, max(0, $0 + Double(random.next() % 9) - 4)) })
        print("perceptual hash: scene \(original), brighter \(brighter), flatter \(flatter), noisy \(noisy)")
        #expect(Self.scene.contains(255), "the brightening clips somewhere")
        #expect(original.distance(to: brighter) <= 4)
        #expect(original.distance(to: flatter) <= 4)
        #expect(original.distance(to: noisy) <= 4)
    }

    /// Unrelated pictures are far apart: the scene, rings around an off-centre point,
    /// diagonal stripes, and a coarse checkerboard (squares of 5 pixels).
    @Test func unrelatedPicturesAreFarApart() {
        let rings = Self.grey { x, y in 128 + 100 * cos(((x - 11) * (x - 11) + (y - 21) * (y - 21)).squareRoot() / 2.5) }
        let stripes = Self.grey { x, y in 128 + 100 * sin((2 * x + y) / 5) }
        let checker = Self.grey { x, y in (Int(x) / 5 + Int(y) / 5) % 2 == 0 ? 230 : 30 }
        let hashes = [Self.scene, rings, stripes, checker].map(Self.hash)
        var distances: [Int] = []
        for first in hashes.indices {
            for second in hashes.indices where second > first {
                let distance = hashes[first].distance(to: hashes[second])
                distances.append(distance)
                #expect(distance >= 20, "pictures \(first) and \(second): \(hashes[first]) \(hashes[second])")
            }
        }
        print("perceptual hash: \(hashes), distances between them \(distances)")
    }

    /// Terms that are zero (a gradient's vertical ones) set no bit whatever the rounding:
    /// a horizontal gradient's hash is the DC bit alone (its horizontal terms are negative),
    /// at any brightness.
    @Test func zeroTermsSetNoBits() {
        let gradient = Self.hash(Self.grey { x, _ in 40 + 5 * x })
        #expect(gradient.hex == "8000000000000000")
        #expect(Self.hash(Self.grey { x, _ in 41.7 + 5 * x }) == gradient)
        let falling = Self.hash(Self.grey { x, _ in 200 - 5 * x })
        // Falling: the odd horizontal terms (bits 62, 60, 58, 56) are positive.
        #expect(falling.hex == "d500000000000000")
    }

    /// A flat picture's hash is the DC bit alone, whatever its (non-zero) value; black's is 0.
    @Test func aFlatPictureHasTheDCBitAlone() {
        for value in [0.1, 1, 128, 200.3, 255] {
            #expect(Self.hash([Double](repeating: value, count: Self.side * Self.side)).hex == "8000000000000000")
        }
        #expect(Self.hash([Double](repeating: 0, count: Self.side * Self.side)).bits == 0)
    }

    /// Sixteen lower-case hex digits, read back; anything else is refused.
    @Test func hexRoundTrips() {
        let hash = Self.hash(Self.scene)
        #expect(hash.hex.count == 16)
        #expect(hash.description == hash.hex)
        #expect(PerceptualHash(hex: hash.hex) == hash)
        #expect(PerceptualHash(hex: hash.hex.uppercased()) == hash)
        #expect(PerceptualHash(bits: 0x00ab_0000_0000_0001).hex == "00ab000000000001")
        #expect(PerceptualHash(hex: "ffffffffffffffff")?.bits == .max)
        for bad in [
            "", "123", "00ab00000000001", "00ab0000000000010", "+0ab000000000001", "0x0b000000000001", "00ab00000000000g",
        ] {
            #expect(PerceptualHash(hex: bad) == nil, "\(bad)")
        }
        #expect(PerceptualHash(bits: 0).distance(to: PerceptualHash(bits: .max)) == 64)
        #expect(PerceptualHash(bits: 0b1011).distance(to: PerceptualHash(bits: 0b0110)) == 3)
    }

    // MARK: Dominant colour

    /// RGBA bytes of `colours`, each repeated its count of times.
    static func pixels(_ colours: [(count: Int, rgba: [UInt8])]) -> [UInt8] {
        colours.flatMap { colour in (0..<colour.count).flatMap { _ in colour.rgba } }
    }

    /// 60 % of one colour (two shades of it, in one bin: their mean) and 40 % of another.
    @Test func theMostCommonColourWins() {
        let rgba = Self.pixels([(30, [200, 30, 90, 255]), (40, [20, 180, 60, 255]), (30, [202, 28, 92, 255])])
        let colour = DominantColour.of(width: 10, height: 10, rgba: rgba)
        #expect(DominantColour.hex(colour) == "#c91d5b")
        #expect(colour == (201, 29, 91))
    }

    /// Pixels with alpha below 128 are left out, however many; when all are, all count.
    @Test func transparentPixelsAreIgnored() {
        let rgba = Self.pixels([(70, [250, 250, 250, 127]), (30, [10, 20, 30, 128])])
        #expect(DominantColour.hex(DominantColour.of(width: 25, height: 4, rgba: rgba)) == "#0a141e")
        let clear = Self.pixels([(70, [250, 250, 250, 0]), (30, [10, 20, 30, 5])])
        #expect(DominantColour.hex(DominantColour.of(width: 100, height: 1, rgba: clear)) == "#fafafa")
    }

    /// Equal counts: the lower bin wins, whatever the order of the pixels; a mean rounds halves up.
    @Test func tiesGoToTheLowerBin() {
        let dark = [UInt8]([16, 0, 255, 255])
        let light = [UInt8]([15, 255, 0, 255])
        for rgba in [Self.pixels([(2, dark), (2, light)]), Self.pixels([(2, light), (2, dark)])] {
            #expect(DominantColour.hex(DominantColour.of(width: 2, height: 2, rgba: rgba)) == "#0fff00")
        }
        let halves = Self.pixels([(1, [1, 2, 3, 255]), (1, [2, 3, 4, 255])])
        #expect(DominantColour.of(width: 1, height: 2, rgba: halves) == (2, 3, 4))
    }

    // MARK: Near-hash index

    /// Bands and probes as a database would use them.
    @Test func bandsAndProbes() {
        #expect(NearHashIndex<Int>.bands(of: 0x0123_4567_89ab_cdef) == [0x0123, 0x4567, 0x89ab, 0xcdef])
        for (radius, count) in [(0, 1), (1, 17), (2, 137), (3, 697), (4, 2517)] {
            let probes = NearHashIndex<Int>.probes(of: 0xbeef, radius: radius)
            #expect(probes.count == count)
            #expect(probes.first == 0xbeef)
            #expect(Set(probes).count == count)
            #expect(probes.allSatisfy { ($0 ^ 0xbeef).nonzeroBitCount <= radius })
        }
        #expect(NearHashIndex<Int>.probes(of: 0, radius: 16).count == 65536)
    }

    /// Against brute force: 20,000 random hashes (and 100 stored twice under other IDs),
    /// IDs a permutation of the insertion order, 2,000 queries each a stored hash with 0…12
    /// bits flipped, and 200 random ones, at distances 0, 4, 10 and 16.
    @Test func theIndexAgreesWithBruteForce() {
        var random = SeededRandom(seed: 42)
        var stored = (0..<20_000).map { _ in random.next() }
        let copies = (0..<100).map { _ in stored[Int(random.next() % 20_000)] }
        stored += copies
        let ids = stored.indices.map { ($0 * 7919) % stored.count }
        var queries: [UInt64] = (0..<2_000).map { index in
            var hash = stored[Int(random.next() % UInt64(stored.count))]
            var flipped = Set<Int>()
            while flipped.count < index % 13 { flipped.insert(Int(random.next() % 64)) }
            for bit in flipped { hash ^= 1 << UInt64(bit) }
            return hash
        }
        queries += (0..<200).map { _ in random.next() }

        let distances = [0, 4, 10, 16]
        var indexes = distances.map { NearHashIndex<Int>(distance: $0) }
        for (hash, id) in zip(stored, ids) {
            for index in indexes.indices { indexes[index].insert(hash, id: id) }
        }
        #expect(indexes.allSatisfy { $0.count == stored.count })
        var mismatches = 0
        var found = [Int](repeating: 0, count: distances.count)
        for query in queries {
            // The brute force: every stored hash's distance, once for all four.
            var best: [(id: Int, distance: Int)?] = Array(repeating: nil, count: distances.count)
            for position in stored.indices {
                let apart = (stored[position] ^ query).nonzeroBitCount
                guard apart <= 16 else { continue }
                for (slot, limit) in distances.enumerated() where apart <= limit {
                    if let current = best[slot], current.id < ids[position] { continue }
                    best[slot] = (ids[position], apart)
                }
            }
            for slot in distances.indices {
                let answer = indexes[slot].earliest(within: query)
                if answer?.id != best[slot]?.id || answer?.distance != best[slot]?.distance { mismatches += 1 }
                if answer != nil { found[slot] += 1 }
            }
        }
        print("near-hash index: of \(queries.count) queries, \(found) found something at distances \(distances)")
        #expect(mismatches == 0)
        // The flipped queries are found when few enough bits were flipped, the random ones never.
        #expect(found[0] >= 2_000 / 13 && found[3] >= 2_000 && found[3] < queries.count)
    }

    /// A million random hashes at distance 10: a query compares far fewer than all of them
    /// (about 4 · 137 / 65536 ≈ 0.8 %), and still finds its neighbour.
    @Test func aQueryTouchesFewEntries() {
        var random = SeededRandom(seed: 1)
        var index = NearHashIndex<Int>(distance: 10)
        var stored: [UInt64] = []
        stored.reserveCapacity(1_000_000)
        for id in 0..<1_000_000 {
            let hash = random.next()
            stored.append(hash)
            index.insert(hash, id: id)
        }
        var examined = 0
        let queries = 200
        for query in 0..<queries {
            let target = Int(random.next() % 1_000_000)
            var hash = stored[target]
            for _ in 0..<(query % 6) { hash ^= 1 << (random.next() % 64) }
            examined += index.candidates(for: hash)
            // The target, or (rarely) another hash within 10 bits with a smaller ID.
            let found = index.earliest(within: hash)
            #expect(found.map { $0.id <= target && (stored[$0.id] ^ hash).nonzeroBitCount == $0.distance } == true)
        }
        let share = Double(examined) / Double(queries) / Double(index.count)
        print("near-hash index: \(examined / queries) candidates a query of \(index.count) (\(share * 100) %)")
        #expect(share < 0.05)
    }
}
