/// Bytes as a dictionary key, hashed in one pass: an array's own `Hashable` feeds the
/// hasher a byte at a time, which made hashing a tenth of a `plan`'s time.
package struct HashedBytes: Hashable, Sendable {
    package let bytes: [UInt8]

    package init(_ bytes: [UInt8]) { self.bytes = bytes }

    package func hash(into hasher: inout Hasher) { bytes.withUnsafeBytes { hasher.combine(bytes: $0) } }
}
