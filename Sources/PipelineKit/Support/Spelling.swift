/// "Did you mean": the nearest of some names to a misspelt one, for pipeline keys and
/// choices and for the command line's commands.
public enum Spelling {
    /// The candidate nearest to `word` (case ignored), when it is at most `distance` edits
    /// away.
    public static func closest(to word: String, in candidates: [String], distance limit: Int = 2) -> String? {
        let scored = candidates.map { ($0, distance(Array(word.lowercased()), Array($0.lowercased()))) }
        guard let best = scored.min(by: { $0.1 < $1.1 }), best.1 <= limit else { return nil }
        return best.0
    }

    /// Levenshtein distance.
    package static func distance(_ a: [Character], _ b: [Character]) -> Int {
        var previous = Array(0...b.count)
        for (i, ca) in a.enumerated() {
            var current = [i + 1]
            for (j, cb) in b.enumerated() {
                current.append(min(previous[j + 1] + 1, current[j] + 1, previous[j] + (ca == cb ? 0 : 1)))
            }
            previous = current
        }
        return previous[b.count]
    }
}
