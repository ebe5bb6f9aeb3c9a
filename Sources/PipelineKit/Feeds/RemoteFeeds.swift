import Foundation

/// Reads feed pages (through the cache, with retries).
public protocol PageSource: Sendable {
    func page(_ url: String) throws -> (Data, Tier)
}

extension RemoteFetcher: PageSource {}

/// `nasa-images`: NASA's image search (Collection+JSON), page by page along the `next`
/// links (until `PagingWatch` stops them); key `data[0].nasa_id`, image
/// `links[rel=preview].href`. An item with neither is left out with a notice.
public struct NASAImagesFeed: Feed {
    public let query: String
    public let endpoint: String
    public let mediaType: String
    public let maxItems: Int?
    public let pages: any PageSource
    /// Told of the items left out (`LeftOutEntries`).
    public var notice: @Sendable (String) -> Void = { _ in }

    /// A cursor with a page starts at that page and passes over its items up to the
    /// cursor's key (all of them are listed when the key is not there any more).
    public func list(after cursor: FeedCursor?, expecting expect: ((FeedCount) -> Void)?, _ body: (FeedItem) throws -> Bool)
        throws
    {
        var components = URLComponents(string: endpoint.hasSuffix("/") ? endpoint + "search" : endpoint + "/search")
        components?.queryItems = [URLQueryItem(name: "q", value: query), URLQueryItem(name: "media_type", value: mediaType)]
        var next = cursor?.page ?? components?.url?.absoluteString
        var count = cursor?.page == nil ? 0 : cursor?.listed ?? 0
        var passing = cursor?.page.map { _ in cursor!.key }
        var seenPages: Set<String> = []
        var watch = PagingWatch()
        while let page = next, seenPages.insert(page).inserted {
            let (data, _) = try pages.page(page)
            defer { passing = nil }
            let answer = try ThirdPartyJSON.decode(Lenient<Page>.self, from: data, what: "the NASA page \(page)")
            guard let collection = answer.value?.collection else {
                throw FeedError("the NASA page \(page) has no \"collection\"")
            }
            let items = collection.items?.elements ?? []
            let onPage = items.compactMap { $0.value?.data?.elements.first?.nasaID?.stringValue }
            if let key = passing, !onPage.contains(key) { passing = nil }
            if seenPages.count == 1, let hits = collection.metadata?.value?.totalHits?.stringValue.flatMap({ Int($0) }) {
                expect?(.reported(hits, maxItems: maxItems))
            }
            var leftOut = LeftOutEntries(
                page: "the NASA page \(page)", noun: ("item", "items"),
                reason: "with no nasa_id or no preview link")
            var cut = LeftOutEntries.withNUL(page: "the NASA page \(page)", noun: ("item", "items"))
            defer {
                leftOut.tell(notice)
                cut.tell(notice)
            }
            for (index, item) in items.enumerated() {
                if let maxItems, count >= maxItems { return }
                guard let data = item.value?.data?.elements.first, let id = data.nasaID?.stringValue else {
                    if passing == nil { leftOut.add(index) }
                    continue
                }
                // A new id is progress along the pages, listed or left out for want of a preview.
                watch.seeing(id)
                // Passing over comes first: the cursor's own item may have lost its preview.
                if let key = passing {
                    if id == key { passing = nil }
                    continue
                }
                guard let href = item.value?.links?.elements.first(where: { $0.rel?.stringValue == "preview" })?.href?.string
                else {
                    leftOut.add(index)
                    continue
                }
                guard !FeedItem.holdsNUL(id, href) else {
                    cut.add(index)
                    continue
                }
                let metadata = JSONValue.object([
                    ("title", data.title ?? .null), ("date", data.dateCreated ?? .null),
                    ("description", data.description ?? .null),
                    ("keywords", data.keywords ?? .array([])),
                ]).serialized()
                count += 1
                watch.listed()
                var listed = FeedItem(key: id, url: href, stem: id, metadata: metadata)
                listed.resumePage = page
                if try !body(listed) { return }
            }
            guard watch.pageEnds() else {
                notice(watch.stopped(at: "the NASA page \(page)"))
                return
            }
            next = collection.links?.elements.first { $0.rel?.stringValue == "next" }?.href?.string
        }
    }

    /// A Collection+JSON answer, as far as it is read; what has another shape reads as missing.
    struct Page: Decodable {
        let collection: Collection?

        struct Collection: Decodable {
            /// One element for each of the page's, nil where it is no item (so that a notice
            /// names the page's own indices).
            let items: LenientArray<Lenient<Item>>?
            let links: LenientArray<Link>?
            let metadata: Lenient<Metadata>?
        }

        struct Metadata: Decodable {
            let totalHits: JSONValue?

            enum CodingKeys: String, CodingKey {
                case totalHits = "total_hits"
            }
        }

        struct Item: Decodable {
            let data: LenientArray<Datum>?
            let links: LenientArray<Link>?
        }

        struct Datum: Decodable {
            let nasaID, title, dateCreated, description, keywords: JSONValue?

            enum CodingKeys: String, CodingKey {
                case nasaID = "nasa_id"
                case title
                case dateCreated = "date_created"
                case description, keywords
            }
        }

        struct Link: Decodable {
            let rel, href: JSONValue?
        }
    }
}

/// `flickr-search`: `flickr.photos.search` page by page until `pages` (or until
/// `PagingWatch` stops it); key = photo id;
/// image = the `url_<size>` extra, else built from server, id and secret. A photo with no
/// id or image is left out with a notice.
public struct FlickrSearchFeed: Feed {
    public let text: String
    public let apiKey: String
    public let endpoint: String
    public let perPage: Int
    public let maxItems: Int?
    public let size: String
    public let pages: any PageSource
    /// Told of the photos left out (`LeftOutEntries`).
    public let notice: @Sendable (String) -> Void

    public init(
        text: String, apiKey: String, endpoint: String, perPage: Int, maxItems: Int?, size: String,
        pages: any PageSource, notice: @escaping @Sendable (String) -> Void = { _ in }
    ) {
        self.text = text
        self.apiKey = apiKey
        self.endpoint = endpoint
        self.perPage = perPage
        self.maxItems = maxItems
        self.size = size
        self.pages = pages
        self.notice = notice
    }

    /// A cursor with a page number starts at that page and passes over its photos up to
    /// the cursor's key (all of them are listed when the key is not there any more).
    public func list(after cursor: FeedCursor?, expecting expect: ((FeedCount) -> Void)?, _ body: (FeedItem) throws -> Bool)
        throws
    {
        let resumeAt = cursor?.page.flatMap { Int($0) }
        var page = resumeAt ?? 1
        var pageCount = page
        var count = resumeAt == nil ? 0 : cursor?.listed ?? 0
        var passing = resumeAt.map { _ in cursor!.key }
        var watch = PagingWatch()
        repeat {
            var components = URLComponents(string: endpoint)
            components?.queryItems = [
                .init(name: "method", value: "flickr.photos.search"), .init(name: "api_key", value: apiKey),
                .init(name: "text", value: text), .init(name: "per_page", value: String(perPage)),
                .init(name: "page", value: String(page)), .init(name: "format", value: "json"),
                .init(name: "nojsoncallback", value: "1"), .init(name: "extras", value: size),
            ]
            guard let address = components?.url?.absoluteString else {
                throw FeedError("flickr-search: bad endpoint \(endpoint)")
            }
            let (data, _) = try pages.page(address)
            let answer = try ThirdPartyJSON.decode(Lenient<Answer>.self, from: data, what: "the Flickr page \(page)").value
            guard answer?.stat?.stringValue == "ok", let photos = answer?.photos?.value else {
                throw FeedError("Flickr answered page \(page) with an error: \(answer?.message?.stringValue ?? "no photos")")
            }
            pageCount = Int(photos.pages?.stringValue ?? "1") ?? 1
            if page == 1, let total = photos.total?.stringValue.flatMap({ Int($0) }) {
                expect?(.reported(total, maxItems: maxItems))
            }
            let onPage = photos.photo?.elements ?? []
            if let key = passing, !onPage.contains(where: { $0.value?["id"]?.stringValue == key }) { passing = nil }
            var leftOut = LeftOutEntries(
                page: "the Flickr page \(page)", noun: ("photo", "photos"), reason: "with no id or no image URL")
            var cut = LeftOutEntries.withNUL(page: "the Flickr page \(page)", noun: ("photo", "photos"))
            defer {
                leftOut.tell(notice)
                cut.tell(notice)
            }
            for (index, entry) in onPage.enumerated() {
                if let maxItems, count >= maxItems { return }
                guard let photo = entry.value, let id = photo["id"]?.stringValue else {
                    if passing == nil { leftOut.add(index) }
                    continue
                }
                watch.seeing(id)
                if let key = passing {
                    if id == key { passing = nil }
                    continue
                }
                var image = photo[size]?.string
                if image == nil, let server = photo["server"]?.stringValue, let secret = photo["secret"]?.stringValue {
                    image = "https://live.staticflickr.com/\(server)/\(id)_\(secret)_b.jpg"
                }
                guard let image, !image.isEmpty else {
                    leftOut.add(index)
                    continue
                }
                guard !FeedItem.holdsNUL(id, image) else {
                    cut.add(index)
                    continue
                }
                let metadata = JSONValue.object([("title", photo["title"] ?? .null), ("owner", photo["owner"] ?? .null)])
                    .serialized()
                count += 1
                watch.listed()
                var listed = FeedItem(key: id, url: image, stem: id, metadata: metadata)
                listed.resumePage = String(page)
                if try !body(listed) { return }
            }
            guard watch.pageEnds() else {
                notice(watch.stopped(at: "the Flickr page \(page) of \(pageCount)"))
                return
            }
            passing = nil
            page += 1
        } while page <= pageCount
    }

    /// A `flickr.photos.search` answer; `pages` and `total` may be numbers or strings, and a photo is
    /// read by member name because the name of its image field (`size`) is configured.
    struct Answer: Decodable {
        let stat, message: JSONValue?
        let photos: Lenient<Photos>?

        struct Photos: Decodable {
            let pages, total: JSONValue?
            /// One element for each of the page's, nil where it is no object.
            let photo: LenientArray<Lenient<[String: JSONValue]>>?
        }
    }
}

/// A remote source with a `fallback`: when the remote feed cannot be listed at all (no
/// page from the server or the cache), the fallback source is listed instead.
public struct FallbackFeed: Feed {
    public let primary: any Feed
    public let fallback: any Feed
    public let onFallback: @Sendable (String) -> Void

    package init(
        primary: any Feed, fallback: any Feed, onFallback: @escaping @Sendable (String) -> Void
    ) {
        self.primary = primary
        self.fallback = fallback
        self.onFallback = onFallback
    }

    /// Local when both are (a table on disk with a folder to fall back on).
    public var listsLocally: Bool { primary.listsLocally && fallback.listsLocally }

    /// The primary starts after `cursor`; a fallback lists from its start.
    public func list(after cursor: FeedCursor?, expecting expect: ((FeedCount) -> Void)?, _ body: (FeedItem) throws -> Bool)
        throws
    {
        var listedAny = false
        do {
            try primary.list(after: cursor, expecting: expect) { item in
                listedAny = true
                return try body(item)
            }
        } catch let error as FeedError where !listedAny {
            onFallback("\(error); using the fallback source")
            try fallback.list(after: nil, expecting: expect) { item in try body(item.asFallback()) }
        }
    }
}
