import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Makes names that come from feeds safe to use below a sink's directory.
package enum SafePath {
    /// A relative path that cannot leave its base directory: no leading `/`, no `..` or
    /// `.` components, no empty components, no NUL or control characters, each component
    /// at most 255 bytes. Never empty.
    package static func relative(_ name: String) -> String {
        if isRelative(name) { return name }
        var components: [String] = []
        // Split at each `/` byte, never at Characters: a `/` followed by a combining mark is
        // one Character, and `../\u{301}x` split so would keep a `..` the file system sees.
        for raw in Self.components(of: name) {
            var component = String(
                decoding: raw.map { byte in byte < 0x20 || byte == 0x7F ? UInt8(ascii: "_") : byte }, as: UTF8.self)
            if component == "." { continue }
            if component == ".." { component = "_" }
            while component.utf8.count > 255 { component.removeFirst() }
            components.append(component)
        }
        return components.isEmpty ? "_" : components.joined(separator: "/")
    }

    /// The components of a relative path as the file system reads it: split at each `/`
    /// byte, empty ones left out.
    package static func components(of path: String) -> [Substring.UTF8View.SubSequence] {
        Substring(path).utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true)
    }

    /// Whether `relative` would give `name` back as it is (most names): no control
    /// character, no empty, `.` or `..` component, none longer than 255 bytes. One pass over
    /// the bytes, where `relative` builds each component anew.
    private static func isRelative(_ name: String) -> Bool {
        var length = 0
        var dots = 0
        func componentEnds() -> Bool { length > 0 && length <= 255 && !(dots == length && dots <= 2) }
        for byte in name.utf8 {
            if byte == UInt8(ascii: "/") {
                guard componentEnds() else { return false }
                length = 0
                dots = 0
                continue
            }
            if byte < 0x20 || byte == 0x7F { return false }
            length += 1
            if byte == UInt8(ascii: ".") { dots += 1 }
        }
        return componentEnds()
    }
}
