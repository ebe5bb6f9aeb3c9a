import Foundation
import PipelineKit

/// One part of a `multipart/form-data` body.
public struct FormPart: Sendable, Equatable {
    public let name: String
    public let filename: String?
    public let contentType: String?
    public let data: Data

    public var text: String { String(decoding: data, as: UTF8.self) }
}

/// Parses `multipart/form-data` (RFC 7578) for the test servers: the boundary from the
/// Content-Type, parts split on `--boundary` lines, each part's headers and body.
public enum MultipartParser {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public static func parse(_ body: Data, contentType: String) throws -> [FormPart] {
        guard contentType.lowercased().hasPrefix("multipart/form-data"),
            let boundaryRange = contentType.range(of: "boundary=")
        else {
            throw Failure(description: "not multipart/form-data: \(contentType)")
        }
        var boundary = String(contentType[boundaryRange.upperBound...])
        if let semicolon = boundary.firstIndex(of: ";") { boundary = String(boundary[..<semicolon]) }
        boundary = boundary.trimmingCharacters(in: CharacterSet(charactersIn: "\" "))
        let delimiter = Data("--\(boundary)".utf8)
        let crlf = Data("\r\n".utf8)
        var parts: [FormPart] = []
        guard var cursor = body.range(of: delimiter)?.upperBound else { throw Failure(description: "no opening boundary") }
        while true {
            if body[cursor...].starts(with: Data("--".utf8)) { return parts }
            guard body[cursor...].starts(with: crlf) else { throw Failure(description: "malformed boundary line") }
            cursor += 2
            guard let headerEnd = body.range(of: Data("\r\n\r\n".utf8), in: cursor..<body.endIndex) else {
                throw Failure(description: "part without a header end")
            }
            let headerText = String(decoding: body[cursor..<headerEnd.lowerBound], as: UTF8.self)
            guard let next = body.range(of: crlf + delimiter, in: headerEnd.upperBound..<body.endIndex) else {
                throw Failure(description: "part without a closing boundary")
            }
            var name = ""
            var filename: String?
            var type: String?
            for line in headerText.components(separatedBy: "\r\n") {
                let lower = line.lowercased()
                if lower.hasPrefix("content-disposition:") {
                    name = parameter("name", in: line) ?? ""
                    filename = parameter("filename", in: line)
                } else if lower.hasPrefix("content-type:") {
                    type = line.dropFirst("content-type:".count).trimmingCharacters(in: .whitespaces)
                }
            }
            parts.append(
                FormPart(name: name, filename: filename, contentType: type, data: body[headerEnd.upperBound..<next.lowerBound]))
            cursor = next.upperBound
        }
    }

    static func parameter(_ key: String, in line: String) -> String? {
        guard let range = line.range(of: "; \(key)=\"") ?? line.range(of: ";\(key)=\"") else { return nil }
        let rest = line[range.upperBound...]
        guard let end = rest.firstIndex(of: "\"") else { return nil }
        return String(rest[..<end])
    }
}
