import Foundation

/// `url-list`: a local file of image URLs, read line by line (gzip or plain): `.txt` (a URL
/// a line, `#` comments), `.csv` (a header with `url` and optionally `key`), `.jsonl`
/// (objects with `url` and optionally `key`). The key is `key`, else the URL. A line with
/// no URL (a CSV row's empty `url`, a `.jsonl` line's `url` missing or not a string), or
/// with a NUL in its URL or key, is a bad line: listing stops there, naming it.
public struct URLListFeed: Feed {
    public let path: String

    public var listsLocally: Bool { true }

    /// Counts the lines first when asked to (`countItems`), then lists them from the start
    /// (a resumed run passes over the items it has).
    public func list(after cursor: FeedCursor?, expecting expect: ((FeedCount) -> Void)?, _ body: (FeedItem) throws -> Bool)
        throws
    {
        if let expect, let count = countItems() { expect(.atMost(count)) }
        try lines(body)
    }

    private func lines(_ body: (FeedItem) throws -> Bool) throws {
        guard FileManager.default.isReadableFile(atPath: path) else { throw FeedError("cannot read URL list \(path)") }
        guard let lines = ListFileLines(path: path) else { throw FeedError("cannot open URL list \(path)") }
        let format = self.format
        var header: [String]?
        var lineNumber = 0
        while let next = try lines.next(counting: &lineNumber) {
            // Refused, not repaired nor split: a part of a line, or a line cut at a NUL or
            // with a byte replaced, would make another URL or key.
            guard case .bytes(let bytes) = next else {
                throw FeedError("\(path):\(lineNumber): line longer than \(ListFileLines.maxLineBytes) bytes")
            }
            guard !bytes.contains(0) else { throw FeedError("\(path):\(lineNumber): a NUL byte in the line") }
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw FeedError("\(path):\(lineNumber): invalid UTF-8")
            }
            let line = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty { continue }
            let url: String
            var key: String?
            switch format {
            case "csv":
                let fields = CSV.fields(line)
                guard let columns = header else {
                    header = fields.map { $0.lowercased() }
                    guard header!.contains("url") else { throw FeedError("\(path): the CSV header has no \"url\" column") }
                    continue
                }
                guard let value = columns.firstIndex(of: "url").flatMap({ $0 < fields.count ? fields[$0] : nil }), !value.isEmpty
                else {
                    throw FeedError("\(path):\(lineNumber): no URL in the \"url\" column")
                }
                url = value
                key = columns.firstIndex(of: "key").flatMap { $0 < fields.count ? fields[$0] : nil }
            case "jsonl":
                // Read leniently like other third-party JSON (`JSONValue+Decodable.swift`).
                struct Line: Decodable { let url, key: JSONValue? }
                guard let object = try? JSONDecoder().decode(Line.self, from: Data(line.utf8)) else {
                    throw FeedError("\(path):\(lineNumber): not a JSON object")
                }
                guard let value = object.url?.string, !value.isEmpty else {
                    throw FeedError("\(path):\(lineNumber): no \"url\" string")
                }
                url = value
                key = object.key?.stringValue
            default:
                if line.hasPrefix("#") { continue }
                url = line
            }
            // A `.jsonl` line's `\u0000` is a NUL too, refused as a NUL byte is: no store
            // keeps it (`LeftOutEntries.withNUL`).
            guard !FeedItem.holdsNUL(url, key) else {
                throw FeedError("\(path):\(lineNumber): a NUL character in the URL or the key")
            }
            let itemKey = (key?.isEmpty == false ? key : nil) ?? url
            if try !body(FeedItem(key: itemKey, url: url, stem: FeedItem.stem(ofURL: url), metadata: nil)) { return }
        }
    }

    /// How many items `list` would list, read ahead without parsing a line: the lines that
    /// are not blank (nor `#` comments in a text list), less a CSV list's header. A row
    /// that turns out to have no URL is counted all the same (listing stops at it). Nil
    /// when the file cannot be opened.
    public func countItems() -> Int? {
        guard let lines = ListFileLines.count(path, skippingComments: format == "txt") else { return nil }
        return format == "csv" ? max(0, lines - 1) : lines
    }

    /// `csv`, `jsonl` or `txt`, by the file's name (a `.gz` suffix aside).
    private var format: String { Self.format(ofName: path) ?? "txt" }

    /// The list format a file name says (`.txt`, `.csv`, `.jsonl` or `.ndjson`, optionally
    /// `.gz`), nil for any other name (which is read as text).
    public static func format(ofName path: String) -> String? {
        var name = (path as NSString).lastPathComponent.lowercased()
        if name.hasSuffix(".gz") { name = String(name.dropLast(3)) }
        if name.hasSuffix(".csv") { return "csv" }
        if name.hasSuffix(".jsonl") || name.hasSuffix(".ndjson") { return "jsonl" }
        return name.hasSuffix(".txt") ? "txt" : nil
    }
}

package enum CSV {
    /// The fields of one CSV line (RFC 4180 quoting; no line breaks inside fields).
    package static func fields(_ line: String) -> [String] {
        var fields: [String] = []
        var field = ""
        var quoted = false
        var iterator = Array(line).makeIterator()
        var pending: Character?
        while let c = pending ?? iterator.next() {
            pending = nil
            if quoted {
                if c == "\"" {
                    if let next = iterator.next() {
                        if next == "\"" {
                            field.append("\"")
                        } else {
                            quoted = false
                            pending = next
                        }
                    } else {
                        quoted = false
                    }
                } else {
                    field.append(c)
                }
            } else if c == "\"" {
                quoted = true
            } else if c == "," {
                fields.append(field.trimmingCharacters(in: .whitespaces))
                field = ""
            } else {
                field.append(c)
            }
        }
        fields.append(field.trimmingCharacters(in: .whitespaces))
        return fields
    }
}
