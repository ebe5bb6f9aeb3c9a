import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Makes names that come from feeds safe to use below a sink's directory.
enum SafePath {
    /// A relative path that cannot leave its base directory: no leading `/`, no `..` or
    /// `.` components, no empty components, no NUL or control characters, each component
    /// at most 255 bytes. Never empty.
    static func relative(_ name: String) -> String {
        var components: [String] = []
        for raw in name.split(separator: "/", omittingEmptySubsequences: true) {
            var component = String(
                String.UnicodeScalarView(
                    raw.unicodeScalars.map { scalar in
                        scalar.value < 0x20 || scalar.value == 0x7F ? "_" : scalar
                    }))
            if component == "." { continue }
            if component == ".." { component = "_" }
            while component.utf8.count > 255 { component.removeFirst() }
            components.append(component)
        }
        return components.isEmpty ? "_" : components.joined(separator: "/")
    }
}
