import Foundation

/// `json-feed`: a JSON array of objects, each with the image URL in `urlField`; the key is
/// `keyField`'s value, else the URL; the other fields are kept as metadata. An entry with
/// no URL string (or that is no object) is left out with a notice.
///
/// The array is the page itself, or the value the `items` pointer finds in it
/// (`"/data/items"` in `{"data": {"items": […]}}`). With a `next` pointer the feed is paged:
/// the page's value there is the URL of the next page (resolved against the page's own),
/// followed until it is missing, null or empty, or until `PagingWatch` stops the paging. A
/// next page that this listing has already read is a loop, and an error.
public struct JSONFeed: Feed {
    public let url: String
    public let urlField: String
    public let keyField: String?
    /// Where a page holds its array of entries; nil: the page is the array.
    public var items: JSONPointer?
    /// Where a page holds the next page's URL; nil: the feed is one page.
    public var next: JSONPointer?
    public let pages: any PageSource
    /// Told of the entries left out (`LeftOutEntries`).
    public var notice: @Sendable (String) -> Void = { _ in }

    /// A paged feed, given a cursor with a page, starts at that page and passes over its
    /// entries up to the cursor's key (all of them are listed when the key is not there any
    /// more); a feed of one page lists from its start (the runner passes over what it has).
    public func list(after cursor: FeedCursor?, expecting expect: ((FeedCount) -> Void)?, _ body: (FeedItem) throws -> Bool)
        throws
    {
        let resumeAt = next == nil ? nil : cursor?.page
        var address = resumeAt ?? url
        var passing = resumeAt == nil ? nil : cursor?.key
        // The pages this listing read, numbered from 1: a `next` back to one of them is a loop.
        var read: [String: Int] = [:]
        var watch = PagingWatch()
        while true {
            read[address] = read.count + 1
            let (data, _) = try pages.page(address)
            let document = try ThirdPartyJSON.decode(JSONValue.self, from: data, what: "the feed at \(address)")
            let entries = try entries(of: document, at: address)
            let following = try nextPage(in: document, after: address)
            let onePage = read.count == 1 && resumeAt == nil && following == nil
            let listing = try list(
                entries, of: address, first: read.count == 1, passing: passing, watch: &watch,
                expect: { if onePage { expect?($0) } }, body)
            guard listing, let following else { return }
            if let earlier = read[following] {
                throw FeedError(
                    "the feed at \(address) gives as its next page (at \(JSONValue.quote(next?.raw ?? "")), source.next) "
                        + "\(following), which is page \(earlier) of this listing: the pages go round in a loop")
            }
            guard watch.pageEnds() else {
                notice(watch.stopped(at: "the feed at \(address)"))
                return
            }
            passing = nil
            address = following
        }
    }

    /// Lists one page's entries, passing over those up to `passing` (a resumed listing's
    /// key, when the page holds it); false when `body` stopped the listing. `expect` is
    /// told the page's count.
    private func list(
        _ entries: [JSONValue], of page: String, first: Bool, passing: String?, watch: inout PagingWatch,
        expect: (FeedCount) -> Void, _ body: (FeedItem) throws -> Bool
    ) throws -> Bool {
        let images = entries.map(image(of:))
        let keys = zip(entries, images).map { item, image in image.map { keyField.flatMap { item[$0]?.stringValue } ?? $0 } }
        let withNUL = zip(keys, images).map { key, image in FeedItem.holdsNUL(key, image) }
        expect(.counted(zip(images, withNUL).count { $0 != nil && !$1 }))
        var leftOut = LeftOutEntries(
            page: "the feed at \(page)", noun: ("entry", "entries"), reason: "with no \(JSONValue.quote(urlField)) string")
        var cut = LeftOutEntries.withNUL(page: "the feed at \(page)")
        defer {
            leftOut.tell(notice)
            cut.tell(notice)
        }
        // Entries, none with an image URL: a misnamed `urlField`, most likely, not an empty feed.
        if first, !entries.isEmpty, images.allSatisfy({ $0 == nil }) {
            throw FeedError(
                "the feed at \(page) has \(entries.count) entries and none with a \(JSONValue.quote(urlField)) string "
                    + "(is urlField right?)")
        }
        var passing = passing.flatMap { key in keys.contains(key) ? key : nil }
        for (index, (item, (image, key))) in zip(entries, zip(images, keys)).enumerated() {
            guard case .object(let members) = item, let image, let key else {
                if passing == nil { leftOut.add(index) }
                continue
            }
            watch.seeing(key)
            if let cursorKey = passing {
                if key == cursorKey { passing = nil }
                continue
            }
            guard !withNUL[index] else {
                cut.add(index)
                continue
            }
            let metadata = JSONValue.object(members.filter { $0.key != urlField }).serialized()
            var listed = FeedItem(key: key, url: image, stem: FeedItem.stem(ofURL: image), metadata: metadata)
            if next != nil { listed.resumePage = page }
            watch.listed()
            if try !body(listed) { return false }
        }
        return true
    }

    /// The image URL of an element that is an object with one (a string, not empty); nil
    /// for anything else.
    private func image(of item: JSONValue) -> String? {
        guard case .object = item, let image = item[urlField]?.string, !image.isEmpty else { return nil }
        return image
    }

    /// The array of entries of the page at `page`: the page itself, or what `items` points at.
    private func entries(of document: JSONValue, at page: String) throws -> [JSONValue] {
        guard let items else {
            if let entries = document.arrayValue { return entries }
            let hint =
                if case .object = document {
                    " (when the array is inside an object, name it with \"items\", a JSON Pointer such as \"/data/items\")"
                } else { "" }
            throw FeedError("the feed at \(page) is not a JSON array of objects\(hint)")
        }
        switch items.resolve(in: document) {
        case .array(let entries)?: return entries
        case nil:
            throw FeedError(
                "the feed at \(page) has nothing at \(JSONValue.quote(items.raw)) (source.items), "
                    + "where its array of entries should be")
        case let other?:
            throw FeedError(
                "the feed at \(page) has \(other.quoted) at \(JSONValue.quote(items.raw)) (source.items), "
                    + "not an array of entries")
        }
    }

    /// The URL of the page after `page`: its value at `next`, resolved against `page`; nil
    /// when the feed is not paged or the value is missing, null or empty.
    private func nextPage(in document: JSONValue, after page: String) throws -> String? {
        guard let next else { return nil }
        let pointer = "\(JSONValue.quote(next.raw)) (source.next)"
        switch next.resolve(in: document) {
        case nil, .null?: return nil
        case .string(let text)?:
            if text.isEmpty { return nil }
            let resolved =
                URL.afterScheme(text) != nil
                ? URL(webAddress: text)
                : URL(webAddress: page).flatMap {
                    URL(string: PercentEscapes.encodingWhatAURLCannotHold(text), relativeTo: $0)?.absoluteURL
                }
            guard !FeedItem.holdsNUL(text), let resolved, ["http", "https"].contains(resolved.scheme?.lowercased() ?? ""),
                resolved.host?.isEmpty == false
            else {
                throw FeedError(
                    "the feed at \(page) has \(JSONValue.quote(text)) at \(pointer), which is no http(s) URL of a next page")
            }
            return resolved.absoluteString
        case let other?:
            throw FeedError(
                "the feed at \(page) has \(other.quoted) at \(pointer), where the next page's URL (a string) should be")
        }
    }
}
