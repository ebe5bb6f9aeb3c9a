/// The entries of one feed page that are left out for want of a key or an image URL: they
/// are told in one notice for the page, naming it and their indices in it (from 0), so that
/// nothing leaves a feed without a word and a page of thousands makes one line.
struct LeftOutEntries {
    /// The page, as the notice names it: `the feed at https://…`.
    let page: String
    /// The entries' noun, singular and plural: `entry`, `entries`.
    let noun: (one: String, many: String)
    /// Why they are left out: `with no "url" string`.
    let reason: String
    private var indices: [Int] = []
    private var count = 0

    /// The indices a notice names; the others are counted.
    static let named = 10

    init(page: String, noun: (one: String, many: String), reason: String) {
        self.page = page
        self.noun = noun
        self.reason = reason
    }

    mutating func add(_ index: Int) {
        count += 1
        if indices.count < Self.named { indices.append(index) }
    }

    /// Gives the notice to `notice`, when any entry was left out.
    func tell(_ notice: (String) -> Void) {
        guard count > 0 else { return }
        let named = indices.map { "[\($0)]" }.joined(separator: ", ") + (count > indices.count ? ", …" : "")
        notice("\(page): \(count) \(count == 1 ? noun.one : noun.many) left out, \(reason): \(named)")
    }
}

extension LeftOutEntries {
    /// The entries of `page` left out for a NUL character in their key or image URL (a
    /// `\u0000` in a feed's JSON): SQLite's text ends at a NUL and PostgreSQL's holds none,
    /// so such a key would be stored cut short (`a\u0000b` as `a`, then the feed's own `a`
    /// taken for a duplicate of it) or changed, and the two stores would disagree.
    static func withNUL(page: String, noun: (one: String, many: String) = ("entry", "entries")) -> LeftOutEntries {
        LeftOutEntries(page: page, noun: noun, reason: "with a NUL character in the key or the image URL")
    }
}
