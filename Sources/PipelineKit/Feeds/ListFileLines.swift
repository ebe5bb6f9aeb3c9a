import CZlib
import Foundation

/// The lines of a URL list, plain or gzipped, read through zlib a block at a time. A line
/// is every byte up to a line feed, NUL bytes included (nothing is cut at one), and is
/// never split: one longer than `maxLineBytes` is reported as too long, read no further
/// than that, and the reader goes on after its line feed. A UTF-8 byte order mark at the
/// start of the file (as some editors save one) is not part of the first line.
final class ListFileLines {
    /// The longest line read: far more than any URL or `.jsonl` entry of a sane list, and
    /// a bound on the memory a hostile list can take.
    static let maxLineBytes = 1 << 20

    enum Line {
        /// The line's bytes, without its line feed.
        case bytes([UInt8])
        /// A line of more than `maxLineBytes` bytes.
        case tooLong
    }

    let path: String
    private let file: gzFile
    private var block = [UInt8](repeating: 0, count: 1 << 16)
    private var start = 0
    private var end = 0
    private var atEnd = false
    private var atStart = true
    /// What zlib said about a damaged file, taken when the read that met it returned: the
    /// lines read whole before it are still given.
    private var damage: String?

    /// Nil when the file cannot be opened.
    init?(path: String) {
        guard let file = gzopen(path, "rb") else { return nil }
        self.path = path
        self.file = file
    }

    deinit { gzclose(file) }

    /// The next line, nil at the end of the file. Throws what zlib said (`damage`) when the
    /// file is cut short or damaged, where the first line it spoils would start.
    func next() throws -> Line? {
        defer { atStart = false }
        var line: [UInt8] = []
        var tooLong = false
        while true {
            if start == end {
                guard !atEnd else { break }
                fill()
                continue
            }
            let available = block[start..<end]
            let feed = available.firstIndex(of: UInt8(ascii: "\n"))
            let stop = feed ?? end
            if !tooLong {
                if line.count + (stop - start) > Self.maxLineBytes {
                    tooLong = true
                    line = []
                } else {
                    line.append(contentsOf: block[start..<stop])
                }
            }
            start = stop
            if feed != nil {
                start += 1
                return tooLong ? .tooLong : .bytes(withoutMark(line))
            }
        }
        if let damage { throw DamagedList(reason: damage) }
        if tooLong { return .tooLong }
        return line.isEmpty ? nil : .bytes(withoutMark(line))
    }

    /// `line` without a byte order mark when it is the file's first.
    private func withoutMark(_ line: [UInt8]) -> [UInt8] {
        atStart && line.starts(with: [0xEF, 0xBB, 0xBF]) ? Array(line.dropFirst(3)) : line
    }

    /// zlib's complaint about a damaged file (the file's own path taken off the front).
    struct DamagedList: Error {
        let reason: String
    }

    /// How many lines of the file at `path` are not blank (nor, `skippingComments`, `#`
    /// comments), read ahead without parsing one: a line too long counts as one, and a
    /// damaged file is counted up to where it is damaged (listing it says where). Nil when
    /// the file cannot be opened.
    static func count(_ path: String, skippingComments: Bool) -> Int? {
        guard let reader = ListFileLines(path: path) else { return nil }
        var lines = 0
        while let line = try? reader.next() {
            guard case .bytes(let bytes) = line else {
                lines += 1
                continue
            }
            // The first byte that is not ASCII white space.
            guard let first = bytes.first(where: { !blank.contains($0) }) else { continue }
            if skippingComments, first == UInt8(ascii: "#") { continue }
            lines += 1
        }
        return lines
    }

    private static let blank = Set(" \t\n\r\u{0B}\u{0C}".utf8)

    /// The next line, counted in `number` (the line's, from 1). A gzip file cut short (or
    /// damaged) is an error where it stops, not a shorter list: the lines before it are
    /// given, not the partial one, and the error names the file and the line.
    func next(counting number: inout Int) throws -> Line? {
        do {
            guard let line = try next() else { return nil }
            number += 1
            return line
        } catch let damage as DamagedList {
            throw FeedError("\(path):\(number + 1): \(damage.reason) (the gzip file is cut short or damaged)")
        }
    }

    /// Reads the next block; a read that meets damage ends the file after what it gave.
    private func fill() {
        start = 0
        let count = block.withUnsafeMutableBytes { gzread(file, $0.baseAddress, UInt32($0.count)) }
        end = max(0, Int(count))
        var code: Int32 = 0
        let text = gzerror(file, &code)
        if count < 0 || (code != Z_OK && code != Z_STREAM_END) {
            var said = text.map { String(cString: $0) } ?? "error \(code)"
            if said.hasPrefix(path + ": ") { said.removeFirst(path.count + 2) }
            damage = said
            atEnd = true
        } else if count == 0 {
            atEnd = true
        }
    }
}
