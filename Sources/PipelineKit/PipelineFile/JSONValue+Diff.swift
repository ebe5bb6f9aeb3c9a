extension JSONValue {
    /// Where two documents differ, as `path: old → new` lines (at most `limit`), for
    /// messages such as "the pipeline's output changed (output.quality: 85 → 90)".
    package static func differences(from old: JSONValue, to new: JSONValue, at path: String, limit: Int = 3) -> [String] {
        var found: [String] = []
        func walk(_ old: JSONValue?, _ new: JSONValue?, _ path: String) {
            guard found.count < limit, old != new else { return }
            switch (old, new) {
            case (.object(let a)?, .object(let b)?):
                var keys = a.map(\.key)
                for key in b.map(\.key) where !keys.contains(key) { keys.append(key) }
                for key in keys { walk(old?[key], new?[key], path + "." + key) }
            case (.array(let a)?, .array(let b)?) where a.count == b.count:
                for index in a.indices { walk(a[index], b[index], path + "[\(index)]") }
            default:
                found.append("\(path): \(describe(old)) → \(describe(new))")
            }
        }
        func describe(_ value: JSONValue?) -> String {
            guard let value else { return "(none)" }
            // A filter chain reads best as its ops: `autorotate, fit → fit`.
            if case .array(let items) = value {
                let ops = items.compactMap { $0["op"]?.stringValue }
                if ops.count == items.count { return ops.isEmpty ? "no filters" : ops.joined(separator: ", ") }
            }
            let text = value.serialized(sortedKeys: true)
            return text.count > 60 ? String(text.prefix(57)) + "…" : text
        }
        walk(old, new, path)
        return found
    }
}
