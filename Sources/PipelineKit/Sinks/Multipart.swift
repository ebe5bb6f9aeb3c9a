import Foundation

/// A `multipart/form-data` body (RFC 7578): text fields, then one file.
struct Multipart {
    let boundary = "imgpipe-" + UUID().uuidString
    var fields: [(name: String, value: String)] = []
    var file: (field: String, filename: String, contentType: String, data: Data)?

    var contentType: String { "multipart/form-data; boundary=\(boundary)" }

    var body: Data {
        var out = Data()
        func line(_ text: String) { out.append(Data((text + "\r\n").utf8)) }
        for field in fields {
            line("--\(boundary)")
            line("Content-Disposition: form-data; name=\"\(Self.quoted(field.name))\"")
            line("")
            line(field.value)
        }
        if let file {
            line("--\(boundary)")
            line(
                "Content-Disposition: form-data; name=\"\(Self.quoted(file.field))\"; filename=\"\(Self.quoted(file.filename))\"")
            line("Content-Type: \(file.contentType)")
            line("")
            out.append(file.data)
            line("")
        }
        line("--\(boundary)--")
        return out
    }

    /// Escapes `"`, CR and LF for a quoted header parameter.
    static func quoted(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "%22")
            .replacingOccurrences(of: "\r", with: "%0D").replacingOccurrences(of: "\n", with: "%0A")
    }
}
