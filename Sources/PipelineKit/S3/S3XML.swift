import Foundation

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// An XML document from S3 (a listing, an upload's id, an error), read into a small tree of
/// elements: names without namespace prefixes, each element's text and children in order.
/// External entities and DTDs are not resolved.
struct S3XML: Sendable {
    let name: String
    var text = ""
    var children: [S3XML] = []

    /// The first child named `name`.
    subscript(_ name: String) -> S3XML? { children.first { $0.name == name } }

    /// Every child named `name`.
    func all(_ name: String) -> [S3XML] { children.filter { $0.name == name } }

    /// The text of the first child named `name`.
    func value(_ name: String) -> String? { self[name]?.text }

    /// The root element, or nil when `data` is not well-formed XML.
    static func parse(_ data: Data) -> S3XML? {
        let parser = XMLParser(data: data)
        let builder = Builder()
        parser.delegate = builder
        parser.shouldResolveExternalEntities = false
        guard parser.parse() else { return nil }
        return builder.root
    }

    private final class Builder: NSObject, XMLParserDelegate {
        var stack: [S3XML] = []
        var root: S3XML?

        func parser(
            _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
            qualifiedName: String?, attributes: [String: String] = [:]
        ) {
            let local = elementName.split(separator: ":").last.map(String.init) ?? elementName
            stack.append(S3XML(name: local))
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            guard !stack.isEmpty else { return }
            stack[stack.count - 1].text += string
        }

        func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
            guard let element = stack.popLast() else { return }
            if stack.isEmpty { root = element } else { stack[stack.count - 1].children.append(element) }
        }
    }
}
