/// One item a feed lists.
public struct FeedItem: Sendable, Equatable {
    /// Stable across runs and unique in a run: the source's id, else the URL or relative path.
    public let key: String
    /// An absolute file path (local sources) or an http(s) URL (remote sources).
    public let location: String
    /// Extra fields kept with the item, as JSON text.
    public let metadata: String?

    public init(key: String, location: String, metadata: String? = nil) {
        self.key = key
        self.location = location
        self.metadata = metadata
    }
}

/// A source of items, listed lazily in a stable order.
public protocol Feed: Sendable {
    /// Calls `body` with each item in order until the feed ends or `body` returns false.
    /// Throws `FeedError` when the feed cannot be listed at all.
    func list(_ body: (FeedItem) throws -> Bool) throws
}

/// A feed that cannot be listed.
public struct FeedError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
