import Foundation

/// `table`: the rows of a table of image URLs, read line by line (gzip or plain): `.csv`
/// (RFC 4180 quoting, a header), `.tsv` (tab-separated, a header) or `.jsonl` (an object a
/// line). Each row's URL, key, caption and SHA-256 come from the columns `columns` names;
/// the item's metadata is an object of the caption, SHA-256 and `keep` columns by their own
/// names (`{meta.NAME}`), as the table wrote them. Without a key column the key is the row's
/// number (from 1). A row whose URL is missing or not an http(s) URL, whose key is empty, or
/// that cannot be read (not UTF-8, a NUL, not a JSON object, longer than 1 MiB) is left out,
/// and one notice at the end names the file, how many rows and their line numbers.
public struct TableFeed: Feed {
    public enum Format: Sendable, Equatable {
        case csv, tsv, jsonl

        /// The format a file name says (`.gz` aside), nil for any other.
        public init?(fileName: String) {
            var name = (fileName as NSString).lastPathComponent.lowercased()
            if name.hasSuffix(".gz") { name = String(name.dropLast(3)) }
            if name.hasSuffix(".csv") {
                self = .csv
            } else if name.hasSuffix(".tsv") || name.hasSuffix(".tab") {
                self = .tsv
            } else if name.hasSuffix(".jsonl") || name.hasSuffix(".ndjson") {
                self = .jsonl
            } else {
                return nil
            }
        }
    }

    public let path: String
    public let format: Format
    public let columns: TableColumns
    public let keep: [String]
    let notice: @Sendable (String) -> Void

    /// The columns that go into each item's metadata, in this order, each once.
    var metadataColumns: [String] {
        var names: [String] = []
        for name in [columns.caption, columns.sha256].compactMap({ $0 }) + keep where !names.contains(name) {
            names.append(name)
        }
        return names
    }

    public func list(after cursor: FeedCursor?, expecting expect: ((FeedCount) -> Void)?, _ body: (FeedItem) throws -> Bool)
        throws
    {
        if let expect, let count = countItems() { expect(.counted(count)) }
        guard let lines = ListFileLines(path: path) else { throw FeedError("cannot open table \(path)") }
        let page = "table \(path)"
        var unreadable = LeftOutEntries(page: page, noun: ("row", "rows"), reason: "that cannot be read, at lines")
        var noURL = LeftOutEntries(
            page: page, noun: ("row", "rows"), reason: "with no http(s) URL in column \"\(columns.url)\", at lines")
        var noKey = LeftOutEntries(
            page: page, noun: ("row", "rows"), reason: "with no key in column \"\(columns.key ?? "")\", at lines")
        defer {
            for entries in [unreadable, noURL, noKey] { entries.tell(notice) }
        }
        var header: [String: Int]?
        var lineNumber = 0
        var rowNumber = 0
        while let next = try lines.next(counting: &lineNumber) {
            guard case .bytes(let bytes) = next, !bytes.contains(0), let text = String(validating: bytes, as: UTF8.self)
            else {
                if header == nil, format != .jsonl { throw FeedError("\(path):\(lineNumber): the header cannot be read") }
                unreadable.add(lineNumber)
                continue
            }
            let line = text.trimmingCharacters(in: .newlines)
            if line.trimmingCharacters(in: .whitespaces).isEmpty { continue }
            let row: [String: JSONValue]
            switch format {
            case .csv, .tsv:
                let fields =
                    format == .csv
                    ? CSV.fields(line) : line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
                guard let columnsAt = header else {
                    header = try readHeader(fields)
                    continue
                }
                row = columnsAt.reduce(into: [:]) { row, column in
                    if column.value < fields.count { row[column.key] = .string(fields[column.value]) }
                }
            case .jsonl:
                guard let value = try? JSONParser.parse(line), case .object(let members) = value else {
                    unreadable.add(lineNumber)
                    continue
                }
                row = Dictionary(members, uniquingKeysWith: { first, _ in first })
            }
            rowNumber += 1
            guard let url = row[columns.url]?.string.map({ $0.trimmingCharacters(in: .whitespaces) }),
                let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme?.lowercased() ?? ""),
                parsed.host?.isEmpty == false
            else {
                noURL.add(lineNumber)
                continue
            }
            let key: String
            if let keyColumn = columns.key {
                guard let value = row[keyColumn]?.stringValue, !value.isEmpty else {
                    noKey.add(lineNumber)
                    continue
                }
                key = value
            } else {
                key = String(rowNumber)
            }
            let kept = metadataColumns.compactMap { name in row[name].map { (key: name, value: $0) } }
            let metadata = kept.isEmpty ? nil : JSONValue.object(kept).serialized()
            guard !FeedItem.holdsNUL(url, key), !(metadata?.contains("\u{0}") ?? false) else {
                unreadable.add(lineNumber)
                continue
            }
            if try !body(FeedItem(key: key, url: url, stem: FeedItem.stem(ofURL: url), metadata: metadata)) { return }
        }
    }

    /// Each column's index; the columns `columns` and `keep` name must be there.
    private func readHeader(_ fields: [String]) throws -> [String: Int] {
        var at: [String: Int] = [:]
        for (index, name) in fields.enumerated() where at[name] == nil { at[name] = index }
        let needed = [columns.url, columns.key, columns.caption, columns.sha256].compactMap { $0 } + keep
        for name in needed where at[name] == nil {
            throw FeedError(
                "\(path): the header has no column \"\(name)\" (it has: \(fields.map { "\"\($0)\"" }.joined(separator: ", ")))")
        }
        return at
    }

    /// How many rows `list` would list: the lines that are not blank, less a header.
    public func countItems() -> Int? {
        guard let lines = ListFileLines.count(path, skippingComments: false) else { return nil }
        return format == .jsonl ? lines : max(0, lines - 1)
    }
}
