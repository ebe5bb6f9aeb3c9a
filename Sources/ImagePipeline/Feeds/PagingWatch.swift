/// Stops a paged listing that goes on without listing anything new: a server whose `next`
/// link (or `pages`) always points at one more page while every page repeats items already
/// listed would otherwise be paged forever. After `idlePages` pages in a row that list no
/// key not listed before, paging stops and the listing counts as complete (the server has
/// given what it has); the feed says so in a notice.
struct PagingWatch {
    static let idlePages = 5

    /// The hashes of the keys listed: 8 bytes a key, not the keys. A collision can only make
    /// a new item look listed for this count, never leave it out.
    private var listed: Set<Int> = []
    private var newOnPage = false
    private var idle = 0

    /// Notes a key the page lists.
    mutating func listing(_ key: String) {
        if listed.insert(key.hashValue).inserted { newOnPage = true }
    }

    /// At the end of a page: false when it is the `idlePages`th in a row that listed no new key.
    mutating func pageEnds() -> Bool {
        idle = newOnPage ? 0 : idle + 1
        newOnPage = false
        return idle < Self.idlePages
    }

    /// The notice of a listing stopped at `page`.
    static func stopped(at page: String) -> String {
        "\(page): \(idlePages) pages in a row listed no new item; stopped paging (the listing counts as complete)"
    }
}
