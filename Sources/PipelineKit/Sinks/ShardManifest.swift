import Foundation
import ParquetKit

/// A shard's manifest, `00000.parquet` beside `00000.tar`: one row per sample, in the
/// shard's order, made from the sample's `KEY.json` record (so that the two never say
/// different things, and a manifest lost in a crash is made again from the shard).
///
/// Columns: `key`, `url`, `caption`, `meta` (the kept columns and feed fields, as JSON
/// text), `width` and `height` (of the first output), `originalWidth` and `originalHeight`
/// (the input as decoded), `sha256` (of the input's bytes), `phash`, `thumbhash` and
/// `dominant` (`ImageFingerprint`); then for each output the sink
/// takes, `output.member`, `output.format`, `output.width`, `output.height`,
/// `output.bytes`, `output.sha256` (`output.ID.member` … with several outputs). Numbers
/// are 64-bit integers, the rest text; a missing value is null.
enum ShardManifest {
    static let outputFields: [(name: String, isInteger: Bool)] = [
        ("member", false), ("format", false), ("width", true), ("height", true), ("bytes", true), ("sha256", false),
    ]
    static let fields: [(name: String, isInteger: Bool)] = [
        ("key", false), ("url", false), ("caption", false), ("meta", false), ("width", true), ("height", true),
        ("originalWidth", true), ("originalHeight", true), ("sha256", false), ("phash", false), ("thumbhash", false),
        ("dominant", false),
    ]

    static func columns(outputs: [String]) -> [ParquetColumn] {
        let one = outputs.count == 1
        let perOutput = outputs.flatMap { id in
            outputFields.map { (name: one ? "output.\($0.name)" : "output.\(id).\($0.name)", isInteger: $0.isInteger) }
        }
        return (fields + perOutput).map { $0.isInteger ? ParquetColumn(name: $0.name, type: .int64) : .text($0.name) }
    }

    /// A record's row.
    static func row(_ record: JSONValue, outputs: [String]) -> [ParquetValue?] {
        func cell(_ value: JSONValue?, integer: Bool) -> ParquetValue? {
            switch value {
            case .number(let number, _)? where integer: return Int64(exactly: number.rounded()).map(ParquetValue.int)
            case .string(let text)? where !integer: return .text(text)
            case nil, .null?: return nil
            case let other?: return integer ? nil : .text(other.serialized())
            }
        }
        var row = fields.map { cell(record[$0.name], integer: $0.isInteger) }
        var byID: [String: JSONValue] = [:]
        if case .array(let made)? = record["outputs"] {
            for output in made { if case .string(let id)? = output["output"] { byID[id] = output } }
        }
        for id in outputs {
            row += outputFields.map { cell(byID[id]?[$0.name], integer: $0.isInteger) }
        }
        return row
    }

    /// Writes the manifest of `records` to `path`, flushed to disk.
    static func write(_ records: [JSONValue], outputs: [String], to path: String) throws(ItemFailure) {
        do {
            let writer = try ParquetWriter(path: path, columns: columns(outputs: outputs))
            for record in records { try writer.append(row(record, outputs: outputs)) }
            try writer.finish(sync: true)
        } catch {
            throw ItemFailure(.upload, "cannot write the shard's manifest \(path): \(error)")
        }
    }

    /// The `KEY.json` records of the shard at `path`, in order: its members named `*.json`
    /// (a sample's record is its only one).
    static func records(inShard path: String) throws -> [JSONValue] {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw ItemFailure(.upload, "cannot open \(path): \(CError())")
        }
        defer { try? handle.close() }
        var records: [JSONValue] = []
        var offset: UInt64 = 0
        while true {
            try handle.seek(toOffset: offset)
            guard let header = try handle.read(upToCount: TarFormat.blockSize), header.count == TarFormat.blockSize,
                header.contains(where: { $0 != 0 })
            else { break }
            let bytes = [UInt8](header)
            let name = String(decoding: bytes[0..<100].prefix { $0 != 0 }, as: UTF8.self)
            let sizeText = String(decoding: bytes[124..<136].prefix { $0 != 0 && $0 != 0x20 }, as: UTF8.self)
            guard let size = Int(sizeText, radix: 8) else {
                throw ItemFailure(.upload, "\(path): a member at byte \(offset) has no size")
            }
            offset += UInt64(TarFormat.blockSize)
            if bytes[156] == UInt8(ascii: "0"), name.hasSuffix(".json") {
                let data = try handle.read(upToCount: size) ?? Data()
                if let text = String(data: data, encoding: .utf8), let record = try? JSONParser.parse(text) {
                    records.append(record)
                }
            }
            offset += UInt64(size + TarFormat.padding(size).count)
        }
        return records
    }
}
