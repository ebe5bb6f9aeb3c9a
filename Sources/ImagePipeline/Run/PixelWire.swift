import Foundation
import PipelineKit

/// The frames between a run and its pixel helpers (`PixelHelpers`, `PixelHelper`), on a Unix
/// stream socket: a header's length (4 bytes) and the payload's (8 bytes), little-endian,
/// then the header, then the payload. A header is a list of fields (`WireFields`); a payload
/// is bytes: an input's bytes sent inline, or an item's encoded outputs one after another.
///
/// Both ends are the same binary, so the form has no version: a helper is always started
/// from the executable of the run that talks to it.
enum PixelWire {
    /// Headers are a few hundred bytes; anything near this is a broken stream.
    static let largestHeader = 64 << 20
    /// An input within `limits.maxBytes`, or an item's outputs (a 100-megapixel 16-bit TIFF
    /// is 800 MB): a frame that says more is a broken stream, not an allocation to try.
    static let largestPayload: UInt64 = 16 << 30

    /// Writes one frame; false when the other end is gone. Never raises SIGPIPE.
    static func write(_ socket: Int32, header: [UInt8], payload: [Data] = []) -> Bool {
        var prefix = [UInt8]()
        prefix.reserveCapacity(12 + header.count)
        appendLittleEndian(UInt64(header.count), bytes: 4, to: &prefix)
        appendLittleEndian(UInt64(payload.reduce(0) { $0 + $1.count }), bytes: 8, to: &prefix)
        prefix += header
        guard prefix.withUnsafeBytes({ sendAll(socket, $0) }) else { return false }
        for part in payload where !part.isEmpty {
            guard part.withUnsafeBytes({ sendAll(socket, $0) }) else { return false }
        }
        return true
    }

    /// Reads one frame; nil at the end of the stream (or a read error, or a frame that
    /// cannot be one).
    static func read(_ socket: Int32) -> (header: [UInt8], payload: Data)? {
        var prefix = [UInt8](repeating: 0, count: 12)
        guard prefix.withUnsafeMutableBytes({ receiveAll(socket, $0) }) else { return nil }
        let headerLength = Int(littleEndian(prefix[0..<4]))
        let payloadLength = littleEndian(prefix[4..<12])
        guard headerLength <= largestHeader, payloadLength <= largestPayload else { return nil }
        var header = [UInt8](repeating: 0, count: headerLength)
        guard header.withUnsafeMutableBytes({ receiveAll(socket, $0) }) else { return nil }
        var payload = Data(count: Int(payloadLength))
        guard payload.withUnsafeMutableBytes({ receiveAll(socket, $0) }) else { return nil }
        return (header, payload)
    }

    /// `value`'s low `bytes` bytes, least significant first (the frames' and fields' integers).
    static func appendLittleEndian(_ value: UInt64, bytes: Int, to out: inout [UInt8]) {
        for index in 0..<bytes { out.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(index)))) }
    }

    static func littleEndian(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        bytes.reversed().reduce(0) { $0 << 8 | UInt64($1) }
    }

    private static func sendAll(_ socket: Int32, _ buffer: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < buffer.count {
            let sent = send(socket, buffer.baseAddress! + offset, buffer.count - offset, Int32(MSG_NOSIGNAL))
            if sent < 0, errno == EINTR { continue }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    private static func receiveAll(_ socket: Int32, _ buffer: UnsafeMutableRawBufferPointer) -> Bool {
        var offset = 0
        while offset < buffer.count {
            let got = recv(socket, buffer.baseAddress! + offset, buffer.count - offset, 0)
            if got < 0, errno == EINTR { continue }
            guard got > 0 else { return false }
            offset += got
        }
        return true
    }
}

/// A header's fields, written: integers as 8 bytes little-endian, strings as their UTF-8
/// length and bytes.
struct WireFields {
    private(set) var bytes: [UInt8] = []

    mutating func put(_ value: Int) {
        PixelWire.appendLittleEndian(UInt64(bitPattern: Int64(value)), bytes: 8, to: &bytes)
    }

    mutating func put(_ text: String) {
        let utf8 = Array(text.utf8)
        put(utf8.count)
        bytes += utf8
    }

    /// A flag (0 or 1), then the string when there is one.
    mutating func put(_ text: String?) {
        put(text == nil ? 0 : 1)
        if let text { put(text) }
    }
}

/// A header's fields, read in the order they were written.
struct WireReader {
    /// The header ended early or held what its writer cannot have written.
    struct Malformed: Error {}

    private let bytes: [UInt8]
    private var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    mutating func int() throws(Malformed) -> Int {
        guard 8 <= bytes.count - offset else { throw Malformed() }
        defer { offset += 8 }
        return Int(Int64(bitPattern: PixelWire.littleEndian(bytes[offset..<offset + 8])))
    }

    mutating func string() throws(Malformed) -> String {
        let count = try int()
        guard count >= 0, count <= bytes.count - offset else { throw Malformed() }
        defer { offset += count }
        return String(decoding: bytes[offset..<offset + count], as: UTF8.self)
    }

    mutating func optionalString() throws(Malformed) -> String? {
        try int() == 0 ? nil : try string()
    }
}
