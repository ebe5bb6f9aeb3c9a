import Foundation
import ImagePipeline
import Testing

@testable import PipelineKit

/// The tables of source and sink kinds in the docs name the kinds of the registries, in
/// their order: a kind added to a registry needs its row, and a row needs its kind.
extension DocsTests {
    /// The first cell of each row of the page's first table whose header starts with
    /// `| type |`, without its backticks.
    static func kindsInTable(ofPage page: String) throws -> [String] {
        let text = try String(contentsOfFile: root + "/" + page, encoding: .utf8)
        var kinds: [String] = []
        var inTable = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let row = line.trimmingCharacters(in: .whitespaces)
            guard inTable else {
                inTable = row.hasPrefix("| type |")
                continue
            }
            guard row.hasPrefix("|") else { break }
            let cell = row.dropFirst().prefix { $0 != "|" }.trimmingCharacters(in: .whitespaces)
            if !cell.hasPrefix("---") { kinds.append(cell.trimmingCharacters(in: CharacterSet(charactersIn: "`"))) }
        }
        return kinds
    }

    @Test func sourceAndSinkTablesNameTheRegistrysKinds() throws {
        #expect(try Self.kindsInTable(ofPage: "docs/sources.md") == SourceRegistry.standard.typeNames)
        #expect(try Self.kindsInTable(ofPage: "docs/sinks.md") == SinkRegistry.standard.typeNames)
    }
}
