/// Stops a paged listing that goes on without listing anything new: a server whose `next`
/// link (or `pages`) always points at one more page while every page repeats items already
/// listed, or brings only new ids without an image, would otherwise be paged forever.
/// Paging stops after `idlePages` pages in a row with no id not seen before, or after
/// `fruitlessPages` in a row that list no item (new ids left out for want of an image count
/// as progress, but not for ever); the listing then counts as complete (the server has given
/// what it has), and the feed says so in a notice.
struct PagingWatch {
    static let idlePages = 5
    static let fruitlessPages = 100

    /// The hashes of the ids seen: 8 bytes an id, not the ids. A collision can only make a
    /// new id look seen for this count, never leave an item out.
    private var seen: Set<Int> = []
    private var newOnPage = false
    private var listedOnPage = false
    private var idle = 0
    private var fruitless = 0

    /// Notes an id the page holds, listed or left out.
    mutating func seeing(_ id: String) {
        if seen.insert(id.hashValue).inserted { newOnPage = true }
    }

    /// Notes that the page listed an item.
    mutating func listed() { listedOnPage = true }

    /// At the end of a page: false when paging must stop here.
    mutating func pageEnds() -> Bool {
        idle = newOnPage ? 0 : idle + 1
        fruitless = listedOnPage ? 0 : fruitless + 1
        newOnPage = false
        listedOnPage = false
        return idle < Self.idlePages && fruitless < Self.fruitlessPages
    }

    /// The notice of a listing stopped at `page`.
    func stopped(at page: String) -> String {
        idle >= Self.idlePages
            ? "\(page): \(Self.idlePages) pages in a row listed no new item; stopped paging (the listing counts as complete)"
            : "\(page): \(Self.fruitlessPages) pages in a row listed nothing (their ids had no image); stopped paging "
                + "(the listing counts as complete)"
    }
}
