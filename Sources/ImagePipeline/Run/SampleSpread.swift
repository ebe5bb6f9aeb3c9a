import PipelineKit

/// Which few entries of a listing a dry-run previews: a sample spread across the folders,
/// the formats and the sizes of the feed, rather than its first entries in byte order
/// (which are often one folder, one camera, one day).
///
/// The entries are grouped by folder, each folder's entries by format (the extension),
/// and each format's entries ordered by size (bytes, when known; else listing order).
/// The count is shared evenly among the folders (a folder with fewer entries than its
/// share gives all it has, and the rest goes to the others; the count left over goes to
/// the largest folders), each folder's share evenly among its formats the same way (or,
/// when a folder's share is less than its formats, one each to the formats the sample
/// has fewest of so far), and each format's share is taken at evenly spaced places of its
/// size order, from the smallest to the largest. Nothing is random: the same listing gives
/// the same sample.
public enum SampleSpread {
    /// What the spread looks at of one listed entry.
    public struct Entry: Sendable, Equatable {
        /// The folder part of the entry's path (or of its URL's path): `""` at the top.
        public let folder: String
        /// The extension, lowercased: `""` when there is none.
        public let format: String
        /// Bytes, when known (local files); entries without one keep their listing order.
        public let size: Int?

        public init(folder: String, format: String, size: Int?) {
            self.folder = folder
            self.format = format
            self.size = size
        }

        /// The folder and extension of a `/`-separated path (a relative key or a URL's
        /// path; a query or fragment is not part of it).
        public init(path: String, size: Int?) {
            let bare = path.prefix { $0 != "?" && $0 != "#" }
            let slash = bare.lastIndex(of: "/")
            let name = slash.map { bare[bare.index(after: $0)...] } ?? bare
            let dot = name.lastIndex(of: ".").flatMap { $0 > name.startIndex ? $0 : nil }
            self.init(
                folder: slash.map { String(bare[..<$0]) } ?? "",
                format: dot.map { name[name.index(after: $0)...].lowercased() } ?? "",
                size: size)
        }
    }

    /// The positions (in `entries`) of the `count` entries to take, in listing order; every
    /// position when `count` is at least the number of entries.
    public static func pick(_ entries: [Entry], count: Int) -> [Int] {
        guard count < entries.count else { return Array(entries.indices) }
        var picked: [Int] = []
        // How many of each format the sample has so far.
        var taken: [String: Int] = [:]
        let folders = groups(entries.indices, by: \.folder, of: entries)
        for (folder, share) in zip(folders, shares(of: count, among: folders.map(\.count))) where share > 0 {
            let formats = groups(folder, by: \.format, of: entries)
            let names = formats.map { entries[$0[0]].format }
            var formatShares = shares(of: share, among: formats.map(\.count))
            if share < formats.count {
                // Not one of each: one of each format the sample has least of so far (then of
                // the folder's most common), so that the folders together show every format.
                let chosen = formats.indices.sorted {
                    (taken[names[$0], default: 0], -formats[$0].count, $0) < (
                        taken[names[$1], default: 0], -formats[$1].count, $1
                    )
                }.prefix(share)
                formatShares = formats.indices.map { chosen.contains($0) ? 1 : 0 }
            }
            for (index, (format, share)) in zip(formats, formatShares).enumerated() where share > 0 {
                taken[names[index], default: 0] += share
                let bySize = format.sorted { (entries[$0].size ?? 0, $0) < (entries[$1].size ?? 0, $1) }
                picked += spaced(share, of: bySize.count).map { bySize[$0] }
            }
        }
        return picked.sorted()
    }

    /// The positions grouped by one field of their entries, groups in the field's order,
    /// positions in listing order within each.
    private static func groups<Positions: Sequence<Int>>(
        _ positions: Positions, by field: KeyPath<Entry, String>, of entries: [Entry]
    ) -> [[Int]] {
        Dictionary(grouping: positions) { entries[$0][keyPath: field] }
            .sorted { $0.key < $1.key }.map(\.value)
    }

    /// `count` (at most the sum of `capacities`) shared as evenly as the capacities allow:
    /// the smallest groups first, each given the even share of what is left or all it has,
    /// so what a small group cannot take goes to the larger ones, and what does not divide
    /// evenly goes to the last (the largest; of equal ones, the later).
    static func shares(of count: Int, among capacities: [Int]) -> [Int] {
        var shares = Array(repeating: 0, count: capacities.count)
        var left = min(count, capacities.reduce(0, +))
        let ascending = capacities.indices.sorted { (capacities[$0], $0) < (capacities[$1], $1) }
        for (position, index) in ascending.enumerated() {
            shares[index] = min(capacities[index], left / (ascending.count - position))
            left -= shares[index]
        }
        return shares
    }

    /// `count` places out of `total` (`count` ≤ `total`), evenly spaced: the middle of each
    /// of `count` equal stretches.
    static func spaced(_ count: Int, of total: Int) -> [Int] {
        (0..<count).map { (2 * $0 + 1) * total / (2 * count) }
    }
}
