/// 64-bit hashes (perceptual hashes) kept so that those within a Hamming distance of a
/// query are found without comparing the query with all of them: multi-index hashing.
///
/// The 64 bits are cut into 4 bands of 16 (band 0 the top 16 bits). If two hashes differ in
/// at most `distance` bits, one of their bands differs in at most `distance / 4` (integer
/// division) bits: were all four bands further apart, the hashes would differ in at least
/// 4 · (distance / 4 + 1) > distance bits. So each band keeps a table from its 16-bit value
/// to the entries having it, and a query looks up, in each band, every value within
/// `distance / 4` bits of its own (`probes(of:radius:)`: 1, 17, 137, 697 or 2517 values for
/// a radius of 0…4), and compares in full only the entries found there.
///
/// With random hashes each value of a band holds count / 65536 entries, so a query at
/// distance 10 (radius 2) examines about 4 · 137 · count / 65536 ≈ 0.8 % of them; at 16
/// (radius 4), about 15 %. A database can use the same scheme: four indexed band columns
/// (`bands(of:)`) and `band_k IN (probes of the query's band k)`, then the full distance.
package struct NearHashIndex<ID: Comparable & Sendable>: Sendable {
    /// The largest Hamming distance a match may have (0…16).
    package let distance: Int
    /// The distance within which a band of a match must lie: `distance / 4`.
    package var bandRadius: Int { distance / 4 }
    /// The masks of at most `bandRadius` bits, which turn a band into its probes.
    @usableFromInline let masks: [UInt16]
    @usableFromInline var hashes: [UInt64] = []
    @usableFromInline var ids: [ID] = []
    /// For each band, indexed by the band's value, the entries with that value: each entry's
    /// whole hash beside its position in `ids`, so that a query reads a bucket in one pass
    /// instead of jumping into `hashes` for each candidate (a cache miss each, at a million).
    @usableFromInline var tables: [[[Entry]]] = Array(repeating: Array(repeating: [], count: 1 << 16), count: 4)

    /// One hash in a band's bucket.
    @usableFromInline struct Entry: Sendable {
        @usableFromInline let hash: UInt64
        @usableFromInline let position: UInt32

        @usableFromInline init(hash: UInt64, position: UInt32) {
            self.hash = hash
            self.position = position
        }
    }

    /// An empty index for matches within `distance` bits (0…16).
    package init(distance: Int) {
        precondition((0...16).contains(distance), "a near-hash index finds matches within 0…16 bits")
        self.distance = distance
        masks = Self.masks(radius: distance / 4)
    }

    /// The number of hashes inserted.
    @inlinable package var count: Int { hashes.count }

    /// Adds `hash` under `id` (IDs are to be unique: `earliest(within:)` returns the smallest).
    @inlinable package mutating func insert(_ hash: UInt64, id: ID) {
        precondition(hashes.count < Int(UInt32.max), "a near-hash index holds fewer than 2³² hashes")
        let position = UInt32(hashes.count)
        hashes.append(hash)
        ids.append(id)
        for (band, value) in Self.bands(of: hash).enumerated() {
            tables[band][Int(value)].append(Entry(hash: hash, position: position))
        }
    }

    /// Among the hashes within `distance` bits of `hash`, the one with the smallest ID: that
    /// ID and its distance, or nil when there is none.
    @inlinable package func earliest(within hash: UInt64) -> (id: ID, distance: Int)? {
        earliest(within: hash) { _ in true }
    }

    /// As `earliest(within:)`, among the entries whose ID `accept` takes.
    @inlinable package func earliest(within hash: UInt64, where accept: (ID) -> Bool) -> (id: ID, distance: Int)? {
        var best: (position: Int, distance: Int)?
        visitCandidates(of: hash) { entry in
            let apart = (entry.hash ^ hash).nonzeroBitCount
            guard apart <= distance else { return }
            let position = Int(entry.position)
            if let current = best, ids[current.position] <= ids[position] { return }
            guard accept(ids[position]) else { return }
            best = (position, apart)
        }
        return best.map { (ids[$0.position], $0.distance) }
    }

    /// How many entries a query for `hash` compares in full (an entry found through two
    /// bands counts twice): what the bands save against `count`.
    @inlinable package func candidates(for hash: UInt64) -> Int {
        var examined = 0
        visitCandidates(of: hash) { _ in examined += 1 }
        return examined
    }

    /// Calls `visit` with every entry whose value in some band is one of that band's probes
    /// for `hash`.
    @inlinable func visitCandidates(of hash: UInt64, _ visit: (Entry) -> Void) {
        for (band, value) in Self.bands(of: hash).enumerated() {
            tables[band].withUnsafeBufferPointer { table in
                for mask in masks {
                    for entry in table[Int(value ^ mask)] { visit(entry) }
                }
            }
        }
    }

    /// The 4 bands of `hash`, 16 bits each, band 0 the top 16 bits.
    @inlinable package static func bands(of hash: UInt64) -> [UInt16] {
        [48, 32, 16, 0].map { UInt16(truncatingIfNeeded: hash >> $0) }
    }

    /// Every 16-bit value within `radius` bits of `band` (0…16), `band` first, then those 1
    /// bit away, and so on (in increasing order within each distance).
    package static func probes(of band: UInt16, radius: Int) -> [UInt16] {
        masks(radius: radius).map { band ^ $0 }
    }

    /// The 16-bit values with at most `radius` bits set, by number of bits, then value.
    private static func masks(radius: Int) -> [UInt16] {
        precondition((0...16).contains(radius), "a band's radius is 0…16 bits")
        var byBits = [[UInt16]](repeating: [], count: radius + 1)
        for mask in 0...UInt16.max where mask.nonzeroBitCount <= radius {
            byBits[mask.nonzeroBitCount].append(mask)
        }
        return byBits.flatMap { $0 }
    }
}
