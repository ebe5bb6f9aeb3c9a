import Foundation
import Logging

/// `s3`: the objects of a bucket under a prefix whose names end with an image extension
/// (as a `directory` source lists), page by page with `ListObjectsV2` (`pageSize` keys a
/// page), in S3's key order. Each item's key is the object's key below the prefix, its
/// location `s3://bucket/key` (fetched with a signed GET through the disk cache), and its
/// metadata the object's `size`, `etag` and `lastModified`.
///
/// The listing resumes: pages follow each other by their continuation token, and a
/// listing of a resumed run starts after the last key the run recorded (`start-after`),
/// so a kill in the middle of a long bucket costs no page twice. S3 says how many keys a
/// page holds, not how many the bucket has: no count is given (progress shows `N+`).
public struct S3Feed: Feed {
    public let client: S3Client
    /// The prefix, ending with `/` unless empty.
    public let folder: String
    public let pageSize: Int
    public let maxItems: Int?
    /// Pages are tried again like feed pages (`retry`); stops when the run does.
    public let retry: RetryLoop
    package let logger: Logger
    /// Masks secrets in what is logged (a `${…}` bucket or prefix).
    package let redact: @Sendable (String) -> String
    /// Told of the objects left out (`LeftOutEntries`): XML holds no NUL character, but a
    /// key is checked as every feed's is, not trusted to the parser.
    package var notice: @Sendable (String) -> Void = { _ in }

    public func list(after cursor: FeedCursor?, expecting expect: ((FeedCount) -> Void)?, _ body: (FeedItem) throws -> Bool)
        throws
    {
        var token: String?
        // `maxItems` counts what the run listed before it was interrupted too.
        var count = cursor?.listed ?? 0
        let startAfter = cursor.map { folder + $0.key }
        repeat {
            let page: S3Client.Page
            do throws(HTTPFailure) {
                page = try retry.run { _ throws(HTTPFailure) in
                    try client.listObjects(prefix: folder, continuation: token, startAfter: startAfter, maxKeys: pageSize)
                }
            } catch {
                throw FeedError(error.message)
            }
            logger.info(
                "feed page",
                metadata: [
                    "url": "\(redact(client.address(of: folder)))", "startAfter": "\(redact(startAfter ?? ""))",
                    "continued": "\(token != nil)", "keys": "\(page.objects.count)",
                ])
            var cut = LeftOutEntries.withNUL(
                page: "the S3 listing of \(redact(client.address(of: folder)))"
                    + (token == nil ? "" : " (a page after the first)"), noun: ("object", "objects"))
            defer { cut.tell(notice) }
            for (index, object) in page.objects.enumerated() where object.key.hasPrefix(folder) {
                let key = String(object.key.dropFirst(folder.count))
                guard !key.isEmpty, !key.hasSuffix("/"),
                    DirectoryFeed.imageExtensions.contains((key as NSString).pathExtension.lowercased())
                else { continue }
                guard !FeedItem.holdsNUL(key) else {
                    cut.add(index)
                    continue
                }
                if let maxItems, count >= maxItems { return }
                count += 1
                let metadata = JSONValue.object([
                    ("size", .number(Double(object.size), isInteger: true)),
                    ("etag", .string(object.etag)),
                    ("lastModified", .string(object.lastModified)),
                ]).serialized()
                if try !body(FeedItem(key: key, location: client.address(of: object.key), metadata: metadata, isLocal: false)) {
                    return
                }
            }
            token = page.next
        } while token != nil
    }
}
