import Foundation

/// One item a feed lists.
public struct FeedItem: Sendable, Equatable {
    /// Stable across runs and unique in a run: the source's id, else the URL or relative path.
    public let key: String
    /// An absolute file path (local sources) or an http(s) URL (remote sources).
    public let location: String
    /// Extra fields kept with the item, as JSON text.
    public let metadata: String?
    /// What `{key}` becomes in output names.
    public let nameKey: String
    /// What `{stem}` becomes in output names.
    public let nameStem: String
    /// True when a remote source's `fallback` listed it.
    public let fromFallback: Bool
    /// True for files of a local source. A remote source's item is never read from the
    /// local disk, whatever its URL looks like: only http(s) is fetched.
    public let isLocal: Bool

    /// Where a listing that stops after this item can start again, for a paged API: the
    /// URL (NASA) or number (Flickr) of the page it was listed from. Nil for other feeds.
    public var resumePage: String?

    /// The item's number in a run that numbered it before the runner saw it (a shared run's
    /// lister numbers the whole feed, from 1): `{index}` and the work folder's file names
    /// use it, so they are the run's on every worker. Nil: the runner numbers items as listed.
    public var position: Int?

    /// A file of a local source (`isLocal`), or an object of a bucket: `{key}` is the
    /// relative path (the object's key below the source's prefix) and `{stem}` the same
    /// without its extension, sub-folders kept (output names are made safe when rendered).
    /// An object is fetched from `location` (`s3://bucket/key`).
    public init(key: String, location: String, metadata: String? = nil, fromFallback: Bool = false, isLocal: Bool = true) {
        self.init(
            key: key, location: location, metadata: metadata, nameKey: key, nameStem: NameTemplate.stem(of: key),
            fromFallback: fromFallback, isLocal: isLocal)
    }

    /// A remote item: `{key}` is the whole key made safe for one file name, and `{stem}`
    /// the given stem (`stem(ofURL:)`, or the source's id), folders kept, each made safe.
    public init(key: String, url: String, stem: String, metadata: String?) {
        self.key = key
        location = url
        self.metadata = metadata
        nameKey = FeedItem.safeName(key)
        nameStem = FeedItem.safeFolders(stem)
        fromFallback = false
        isLocal = false
    }

    /// This item as listed by a fallback source.
    func asFallback() -> FeedItem {
        FeedItem(
            key: key, location: location, metadata: metadata, nameKey: nameKey, nameStem: nameStem,
            fromFallback: true, isLocal: isLocal)
    }

    /// This item as it may be recorded: its key as `Environment.recorded` writes it (read
    /// back with `restored` to resume a listing after it), `${…}` values in its names put
    /// back as references (names are never expanded again), masked in its metadata. The
    /// location stays as it is (it is fetched); the runner records it with `recorded`.
    package func withoutSecrets(_ environment: Environment) -> FeedItem {
        FeedItem(
            key: environment.recorded(key), location: location, metadata: metadata.map(environment.redact),
            nameKey: environment.referencing(nameKey), nameStem: environment.referencing(nameStem),
            fromFallback: fromFallback, isLocal: isLocal)
    }

    /// This item as a shared run's database keeps it: `withoutSecrets`, and the location
    /// recorded too, so no secret is stored and none can be read back into it.
    package func forSharedState(_ environment: Environment) -> FeedItem {
        let clean = withoutSecrets(environment)
        return FeedItem(
            key: clean.key, location: environment.recorded(location), metadata: clean.metadata,
            nameKey: clean.nameKey, nameStem: clean.nameStem, fromFallback: fromFallback, isLocal: isLocal)
    }

    /// This item, read back from a shared run's database, ready to fetch: its location restored.
    package func fromSharedState(_ environment: Environment) -> FeedItem {
        FeedItem(
            key: key, location: environment.restored(location), metadata: metadata, nameKey: nameKey,
            nameStem: nameStem, fromFallback: fromFallback, isLocal: isLocal)
    }

    /// An item exactly as recorded (a shared run's database gives back what its lister listed).
    package init(
        key: String, location: String, metadata: String?, nameKey: String, nameStem: String,
        fromFallback: Bool, isLocal: Bool
    ) {
        self.key = key
        self.location = location
        self.metadata = metadata
        self.nameKey = nameKey
        self.nameStem = nameStem
        self.fromFallback = fromFallback
        self.isLocal = isLocal
    }

    /// `text` in NFC with every character other than letters and digits (of any script:
    /// `Été` stays `Été`), `.`, `-` and `_` replaced by `_`, no leading dot, at most 200
    /// characters; never empty. One file name: a `/` is replaced too.
    public static func safeName(_ text: String) -> String {
        var out = String(
            text.precomposedStringWithCanonicalMapping.map { c -> Character in
                c.isLetter || c.isNumber || c == "." || c == "-" || c == "_" ? c : "_"
            })
        while out.hasPrefix(".") { out.removeFirst() }
        if out.count > 200 { out = String(out.prefix(200)) }
        return out.isEmpty ? "_" : out
    }

    /// `text` as folders and a file name, each part readable as written (NFC; spaces, `%`
    /// and letters of any script kept) and safe: control characters and bidirectional
    /// overrides become `_`, a part loses its leading dots (no hidden files, no `..`), empty
    /// parts are dropped, each part is at most 200 characters; never empty. (`SafePath`
    /// makes the rendered name safe again, whatever a template adds.)
    static func safeFolders(_ text: String) -> String {
        // Split at each `/` scalar: a `/` and a combining mark after it are one Character.
        let scalars = text.precomposedStringWithCanonicalMapping.unicodeScalars
        let parts = scalars.split(separator: "/").compactMap { part -> String? in
            var out = String(
                String.UnicodeScalarView(
                    part.map { scalar in
                        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || (0x202A...0x202E).contains(scalar.value)
                            || (0x2066...0x2069).contains(scalar.value) || scalar == "\\" ? "_" : scalar
                    }))
            while out.hasPrefix(".") { out.removeFirst() }
            if out.count > 200 { out = String(out.prefix(200)) }
            return out.isEmpty ? nil : out
        }
        return parts.isEmpty ? "_" : parts.joined(separator: "/")
    }

    /// Whether any of `texts` holds a NUL character: such an entry is left out when listed
    /// (`LeftOutEntries.withNUL`), since no store keeps the text whole (a SQLite text ends at
    /// a NUL, a PostgreSQL text holds none).
    static func holdsNUL(_ texts: String?...) -> Bool {
        texts.contains { $0?.utf8.contains(0) == true }
    }

    /// What `{stem}` is for an item listed by its URL: the URL's path below the host, its
    /// escapes decoded (`%2F` and escapes of control characters kept as they are), folders
    /// kept, without the last segment's extension (`http://h/shop/101/main.jpg?x=1` →
    /// `shop/101/main`). Items of one host are named apart by construction; a URL with a
    /// query (`/img.php?id=7`) is told apart by the first 8 hex digits of the SHA-256 of
    /// the URL (`img-1a2b3c4d`), since its path alone names several images.
    public static func stem(ofURL url: String) -> String {
        let rest = URL.afterScheme(url).map { $0.drop { $0 != "/" && $0 != "?" && $0 != "#" } } ?? Substring(url)
        let path = rest.prefix { $0 != "?" && $0 != "#" }
        let query = rest.dropFirst(path.count).prefix { $0 != "#" }
        var stem = NameTemplate.stem(of: PercentEscapes.decodedPath(String(path)))
        while stem.hasSuffix("/") { stem.removeLast() }
        if stem.drop(while: { $0 == "/" }).isEmpty { stem = "image" }
        if query.count > 1 { stem += "-" + sha256Hex(url).prefix(8) }
        return stem
    }
}

/// A source of items, listed lazily in a stable order. A feed implements one method,
/// `list(after:expecting:_:)`; `list(_:)` and `list(expecting:_:)` are that method's
/// plain uses.
public protocol Feed: Sendable {
    /// Calls `body` with each item in order until the feed ends or `body` returns false;
    /// throws `FeedError` when the feed cannot be listed at all.
    ///
    /// `cursor` is where an earlier, interrupted listing of the run stopped: a feed that
    /// can start after it (a folder walked in order, an S3 listing's `start-after`, a paged
    /// API's page) does, and lists nothing twice; the others list from the start, and the
    /// runner passes over the items it has. `expect`, when given, is told how many items
    /// the feed expects to list, as soon as that is cheap to know: before the first item
    /// for a local folder or file, with the first page for a remote source. It may be
    /// called again (a fallback source takes over) or never (the source does not say);
    /// progress lines use it for their total, and `run --incremental`'s look (`UpToDate`)
    /// to end early when the count rules its run out. Without it a local feed counts nothing.
    func list(after cursor: FeedCursor?, expecting expect: ((FeedCount) -> Void)?, _ body: (FeedItem) throws -> Bool) throws
    /// Whether the listing reads only local files (a folder, a URL list, a table on disk):
    /// listed twice, it asks no server anything twice.
    var listsLocally: Bool { get }
}

/// Where a resumed listing starts: after the item `key`, the run having recorded `listed`
/// items before (a feed's `maxItems` counts them). `page` is the key's `resumePage`: a
/// paged API starts again at that page (and passes over its items up to `key`) instead of
/// its first.
public struct FeedCursor: Sendable, Equatable, Codable {
    public let key: String
    public let listed: Int
    public let page: String?

    public init(key: String, listed: Int, page: String? = nil) {
        self.key = key
        self.listed = listed
        self.page = page
    }
}

extension Feed {
    /// Listed from a server, unless the feed says otherwise.
    public var listsLocally: Bool { false }

    /// Every item, from the start, counting nothing.
    public func list(_ body: (FeedItem) throws -> Bool) throws {
        try list(after: nil, expecting: nil, body)
    }

    /// Every item, from the start, telling `expect` how many there will be.
    public func list(expecting expect: @escaping (FeedCount) -> Void, _ body: (FeedItem) throws -> Bool) throws {
        try list(after: nil, expecting: expect, body)
    }
}

/// How many items a feed expects to list.
public struct FeedCount: Sendable, Equatable {
    public enum Kind: Sendable {
        /// What the feed will list (a folder, a one-page JSON feed).
        case exact
        /// Entries counted, some of which the listing may leave out (a URL list's lines,
        /// a table's rows): it lists at most that many.
        case atMost
        /// What a remote API says it holds (NASA's `total_hits`, Flickr's `total`), which
        /// the listing may not reach.
        case estimate
    }

    public let items: Int
    public let kind: Kind

    public static func counted(_ items: Int) -> FeedCount { FeedCount(items: items, kind: .exact) }

    /// Entries counted, each listed unless it is left out (no URL, unreadable).
    public static func atMost(_ items: Int) -> FeedCount { FeedCount(items: items, kind: .atMost) }

    /// What an API reports, capped by the source's own `maxItems`.
    public static func reported(_ items: Int, maxItems: Int?) -> FeedCount {
        FeedCount(items: max(0, min(items, maxItems ?? .max)), kind: .estimate)
    }
}

/// A feed that cannot be listed.
public struct FeedError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
