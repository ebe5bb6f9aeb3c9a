import Foundation
import ParquetKit

/// `table`: the rows of a table of image URLs, read line by line (gzip or plain): `.csv`
/// (RFC 4180 quoting, a header), `.tsv` (tab-separated, a header) or `.jsonl` (an object a
/// line); or a row group at a time: `.parquet` (TableFeed+Parquet.swift). Each row's URL, key, caption and SHA-256 come from the columns `columns` names;
/// the item's metadata is an object of the caption, SHA-256 and `keep` columns by their own
/// names (`{meta.NAME}`), as the table wrote them. Without a key column the key is the row's
/// number (from 1). A row whose URL is missing or not an http(s) URL, whose key is empty, or
/// that cannot be read (not UTF-8, a NUL, not a JSON object, longer than 1 MiB) is left out,
/// and one notice at the end names the file, how many rows and their line (or row) numbers.
public struct TableFeed: Feed {
    public enum Format: Sendable, Equatable {
        case csv, tsv, jsonl, parquet

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
            } else if name.hasSuffix(".parquet") {
                self = .parquet
            } else {
                return nil
            }
        }
    }

    /// The file, or the object's `s3://bucket/key` address (`object`).
    public let path: String
    public let format: Format
    public let columns: TableColumns
    public let keep: [String]
    let notice: @Sendable (String) -> Void
    /// An object of a bucket to download first, when the table is not a local file.
    var object: Object?
    /// The file read, when it is not `path` (a downloaded object's copy, a gzipped Parquet
    /// file unpacked: `unpacked`).
    var file: String?
    var unpacked = false

    /// A table in a bucket: downloaded to a file without a name before it is read.
    struct Object: Sendable {
        let client: S3Client
        let key: String
        let http: HTTPClient
        let attempts: Int
        let backoff: Double
    }

    init(
        path: String, format: Format, columns: TableColumns, keep: [String], notice: @escaping @Sendable (String) -> Void
    ) {
        self.path = path
        self.format = format
        self.columns = columns
        self.keep = keep
        self.notice = notice
    }

    /// Where the table's bytes are read.
    var readPath: String { file ?? path }

    /// The columns that go into each item's metadata, in this order, each once.
    var metadataColumns: [String] {
        var names: [String] = []
        for name in [columns.caption, columns.sha256].compactMap({ $0 }) + keep where !names.contains(name) {
            names.append(name)
        }
        return names
    }

    /// The columns the listing reads: the URL's, the key's, then the metadata's.
    var neededColumns: [String] {
        var names = [columns.url]
        for name in [columns.key].compactMap({ $0 }) + metadataColumns where !names.contains(name) { names.append(name) }
        return names
    }

    /// A row as read: its cells by column name (nil when the row cannot be read), and where
    /// it is: its line (CSV, TSV, JSON Lines) or its row number from 1 (Parquet).
    struct Row {
        let cells: [String: JSONValue]?
        let at: Int
    }

    /// A table on disk; an object of a bucket is downloaded to be listed.
    public var listsLocally: Bool { object == nil }

    /// Lists the rows in order. After `cursor` (a resumed run), the rows up to the cursor's
    /// key are passed over, not listed: a Parquet table starts at the row group that holds
    /// it (found from the key column alone, or from the row number when the key is one), a
    /// text table reads its lines up to it. A key the table no longer holds means the table
    /// changed: the listing starts from the first row, and the runner passes over the items
    /// it has.
    public func list(after cursor: FeedCursor?, expecting expect: ((FeedCount) -> Void)?, _ body: (FeedItem) throws -> Bool)
        throws
    {
        if let object {
            let copy = try download(object)
            defer { try? copy.close() }
            var local = self
            local.object = nil
            local.file = "/proc/self/fd/\(copy.fileDescriptor)"
            return try local.list(after: cursor, expecting: expect, body)
        }
        if format == .parquet, !unpacked, path.lowercased().hasSuffix(".gz") {
            // Unpacked once for the whole listing (a resume reads it twice).
            let copy = try gunzip()
            defer { try? copy.close() }
            var local = self
            local.file = "/proc/self/fd/\(copy.fileDescriptor)"
            local.unpacked = true
            return try local.list(after: cursor, expecting: expect, body)
        }
        let table = format == .parquet ? try openParquet() : nil
        if let expect, let count = table.map({ Int($0.rowCount) }) ?? countItems() { expect(.atMost(count)) }
        let page = "table \(path)"
        let unit = format == .parquet ? "rows" : "lines"
        var unreadable = LeftOutEntries(page: page, noun: ("row", "rows"), reason: "that cannot be read, at \(unit)")
        var noURL = LeftOutEntries(
            page: page, noun: ("row", "rows"), reason: "with no http(s) URL in column \"\(columns.url)\", at \(unit)")
        var noKey = LeftOutEntries(
            page: page, noun: ("row", "rows"), reason: "with no key in column \"\(columns.key ?? "")\", at \(unit)")
        defer {
            for entries in [unreadable, noURL, noKey] { entries.tell(notice) }
        }
        var rowNumber = 0
        // After a cursor, rows are passed over up to its key, and taken for the same table
        // only if as many of them made items as the run listed; else it is listed anew.
        var passing = cursor
        var passedItems = 0
        var changed = false
        var startRow = 0
        if let table, let cursor {
            if let row = try parquetRow(of: table, after: cursor) { startRow = row }
            passing = nil
        }
        func handle(_ row: Row) throws -> Bool {
            let counted = passing == nil
            rowNumber = format == .parquet ? row.at : rowNumber + (row.cells == nil ? 0 : 1)
            let (url, key): (String, String)
            switch verdict(row.cells, rowNumber: rowNumber) {
            case .unreadable:
                if counted { unreadable.add(row.at) }
                return true
            case .noURL:
                if counted { noURL.add(row.at) }
                return true
            case .noKey:
                if counted { noKey.add(row.at) }
                return true
            case .item(let itemURL, let itemKey):
                (url, key) = (itemURL, itemKey)
            }
            if let wanted = passing {
                passedItems += 1
                guard key == wanted.key else { return true }
                guard passedItems == wanted.listed else {
                    changed = true
                    return false
                }
                passing = nil
                return true
            }
            let kept = metadataColumns.compactMap { name in row.cells?[name].map { (key: name, value: $0) } }
            let metadata = kept.isEmpty ? nil : JSONValue.object(kept).serialized()
            guard !(metadata?.contains("\u{0}") ?? false) else {
                unreadable.add(row.at)
                return true
            }
            return try body(FeedItem(key: key, url: url, stem: FeedItem.stem(ofURL: url), metadata: metadata))
        }
        if let table {
            try parquetRows(of: table, from: startRow, handle)
            return
        }
        try textRows(handle)
        if passing != nil || changed {
            // The cursor's key is gone, or rows before it came or went: from the start, as a
            // new listing (the runner passes over the items it has).
            passing = nil
            rowNumber = 0
            try textRows(handle)
        }
    }

    /// What a row makes: an item (its URL and key), or why it is left out. `rowNumber` is
    /// the key of a table without a key column.
    enum Verdict: Equatable {
        case item(url: String, key: String)
        case unreadable, noURL, noKey
    }

    func verdict(_ cells: [String: JSONValue]?, rowNumber: Int) -> Verdict {
        guard let cells else { return .unreadable }
        guard let url = cells[columns.url]?.string.map({ $0.trimmingCharacters(in: .whitespaces) }),
            let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme?.lowercased() ?? ""),
            parsed.host?.isEmpty == false
        else { return .noURL }
        let key: String
        if let keyColumn = columns.key {
            guard let value = cells[keyColumn]?.stringValue, !value.isEmpty else { return .noKey }
            key = value
        } else {
            key = String(rowNumber)
        }
        return FeedItem.holdsNUL(url, key) ? .unreadable : .item(url: url, key: key)
    }

    /// The rows of a CSV, TSV or JSON Lines table.
    private func textRows(_ each: (Row) throws -> Bool) throws {
        guard let lines = ListFileLines(path: readPath) else { throw FeedError("cannot open table \(path)") }
        var header: [String: Int]?
        var lineNumber = 0
        while let next = try lines.next(counting: &lineNumber) {
            guard case .bytes(let bytes) = next, !bytes.contains(0), let text = String(validating: bytes, as: UTF8.self)
            else {
                if header == nil, format != .jsonl { throw FeedError("\(path):\(lineNumber): the header cannot be read") }
                if try !each(Row(cells: nil, at: lineNumber)) { return }
                continue
            }
            let line = text.trimmingCharacters(in: .newlines)
            if line.trimmingCharacters(in: .whitespaces).isEmpty { continue }
            let cells: [String: JSONValue]?
            switch format {
            case .csv, .tsv:
                let fields =
                    format == .csv
                    ? CSV.fields(line) : line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
                guard let columnsAt = header else {
                    header = try readHeader(fields)
                    continue
                }
                cells = columnsAt.reduce(into: [:]) { row, column in
                    if column.value < fields.count { row[column.key] = .string(fields[column.value]) }
                }
            case .jsonl:
                if let value = try? JSONParser.parse(line), case .object(let members) = value {
                    cells = Dictionary(members, uniquingKeysWith: { first, _ in first })
                } else {
                    cells = nil
                }
            case .parquet:
                preconditionFailure("a Parquet table is not read as text")
            }
            if try !each(Row(cells: cells, at: lineNumber)) { return }
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

    /// How many rows `list` would list: the lines that are not blank, less a header; a
    /// Parquet file's row count (from its footer; none for a gzipped one, which `list`
    /// counts once it has unpacked it).
    public func countItems() -> Int? {
        guard object == nil else { return nil }
        if format == .parquet {
            guard !path.lowercased().hasSuffix(".gz"), let reader = try? ParquetReader(path: readPath) else { return nil }
            return Int(reader.rowCount)
        }
        guard let lines = ListFileLines.count(readPath, skippingComments: false) else { return nil }
        return format == .jsonl ? lines : max(0, lines - 1)
    }
}

extension TableFeed {
    /// The object downloaded (with the run's retries) into a temporary file whose name is
    /// removed before the download starts (it is written through `/proc/self/fd`): nothing
    /// is left behind whenever the process dies.
    func download(_ object: Object) throws -> FileHandle {
        let handle = try Self.nameless()
        let temporary = "/proc/self/fd/\(handle.fileDescriptor)"
        let request = object.client.getRequest(
            key: object.key, headers: [:], destination: temporary, maxBytes: Int(Self.maximumUnpacked))
        let result: HTTPResult
        do {
            result = try object.http.performWithRetries(request, attempts: object.attempts, backoff: object.backoff)
        } catch {
            throw FeedError("cannot read table \(path): \(error.message)")
        }
        guard (200..<300).contains(result.status) else {
            throw FeedError("cannot read table \(path): HTTP \(result.status)")
        }
        return handle
    }

    /// A new file in the temporary folder, open for reading and writing, its name removed.
    static func nameless() throws -> FileHandle {
        let folder = NSTemporaryDirectory()
        var template = Array((folder + "/imgpipe-table-XXXXXX").utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard descriptor >= 0 else {
            throw FeedError("cannot make a temporary file in \(folder): \(String(cString: strerror(errno)))")
        }
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        return FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    }
}
