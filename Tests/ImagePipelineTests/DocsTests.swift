import Foundation
import ImagePipelineTesting
import Testing

@testable import PipelineKit

/// The documentation kept true to the tree: links that lead somewhere, pipelines that
/// validate, and an architecture document whose names are the code's.
///
/// Links: every relative Markdown link (`[text](target)`, outside code) of README.md,
/// ARCHITECTURE.md, bench/RESULTS.md, samples/README.md and docs/**/*.md must name a file
/// or folder that exists, relative to the page; a `#anchor` (alone, or after a `.md` file)
/// must be the GitHub slug of one of that page's headings. Links with a scheme (`https:`,
/// `mailto:`) are not followed.
///
/// ARCHITECTURE.md's names: every `backticked` name outside code blocks that looks like code
/// is looked up in Sources/ and Tests/ (and Package.swift, for target names):
/// - an UpperCamel identifier (`PipelineSpec`; not all capitals, which are signals, SQL or
///   acronyms: `SIGFPE`, `WAL`) must occur as a word;
/// - `Type.member` or `Type.member(labels:)` (the type UpperCamel) must have the type and a
///   declaration of the member (`func`, `var`, `let`, `case`, a nested type);
/// - `name()` or `name(labels:)` must be declared as a function (or be a C function the C
///   files define or call: `prctl(PR_SET_PDEATHSIG)`);
/// - a file name (`Foo.swift`, `Bar.c`, `shim.h`) must be a file of the tree;
/// - a path with a `/` (`Sources/CVips/shim.h`, `Run/RunStages.swift`, `Store/`) must be one,
///   from the root or as the tail of a path under Sources/ or Tests/.
/// Skipped: spans with spaces (commands, SQL, messages), lower-case words and dotted keys
/// (JSON keys, ops, `limits.memory`), flags, `${…}`, anything with `<`, `*`, `=`, `"`, and
/// file names that are not code (`README.md`, `job.yaml`) unless given as a path.
///
/// Three kinds of claim are checked against the code, not only the names:
/// - "`Type` (in `File.swift`)": that file declares the type;
/// - the table of targets: a C module "imported only by `Target`, in `File.swift`" is
///   imported by each file named and by no other file of that target;
/// - "`Folder/` (`A.swift`, `B.swift`)": the list is the folder's files, all of them;
///   "`Folder/` (`TypeA`, `TypeB`)": each type is declared in that folder.
@Suite("Docs")
struct DocsTests {
    static let root = DeployTests.root

    // MARK: - links

    static func markdownPages() throws -> [String] {
        var pages = ["README.md", "ARCHITECTURE.md", "bench/RESULTS.md", "samples/README.md"]
        let docs = root + "/docs"
        guard let walker = FileManager.default.enumerator(atPath: docs) else { return pages }
        for case let path as String in walker where path.hasSuffix(".md") {
            pages.append("docs/" + path)
        }
        return pages.sorted()
    }

    /// The text of a Markdown page without its fenced code blocks, and with each inline code
    /// span replaced by `code` (a link's text may be code; a link inside code is no link).
    static func prose(_ text: String) -> String {
        var lines: [String] = []
        var fenced = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.trimmingCharacters(in: .whitespaces).hasPrefix("```") {
                fenced.toggle()
                lines.append("")
                continue
            }
            lines.append(fenced ? "" : String(line))
        }
        return replacing(#"`[^`\n]*`"#, in: lines.joined(separator: "\n"), with: "code")
    }

    static func replacing(_ pattern: String, in text: String, with template: String) -> String {
        guard let expression = try? NSRegularExpression(pattern: pattern) else { return text }
        return expression.stringByReplacingMatches(
            in: text, range: NSRange(text.startIndex..., in: text), withTemplate: template)
    }

    /// The first capture group of every match of `pattern` in `text`.
    static func captures(_ pattern: String, in text: String, group: Int = 1) -> [String] {
        guard let expression = try? NSRegularExpression(pattern: pattern) else { return [] }
        return expression.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap {
            Range($0.range(at: group), in: text).map { String(text[$0]) }
        }
    }

    /// GitHub's anchor for a heading: lower case, inline code marks and punctuation dropped
    /// (letters, digits, `-`, `_` and spaces kept), spaces turned into `-`.
    static func slug(_ heading: String) -> String {
        let kept = heading.lowercased().unicodeScalars.filter {
            CharacterSet.alphanumerics.contains($0) || $0 == "-" || $0 == "_" || $0 == " "
        }
        return String(String.UnicodeScalarView(kept)).replacingOccurrences(of: " ", with: "-")
    }

    /// The anchors of a page's headings, with GitHub's `-1`, `-2` for repeated ones.
    static func anchors(ofPage path: String) throws -> Set<String> {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var seen: [String: Int] = [:]
        var anchors: Set<String> = []
        var fenced = false
        for line in text.split(separator: "\n") {
            if line.hasPrefix("```") { fenced.toggle() }
            guard !fenced, line.hasPrefix("#") else { continue }
            let base = slug(line.drop { $0 == "#" }.trimmingCharacters(in: .whitespaces))
            let count = seen[base, default: 0]
            seen[base] = count + 1
            anchors.insert(count == 0 ? base : "\(base)-\(count)")
        }
        return anchors
    }

    /// Every broken relative link of `page` (a path from `root`), as `page: target (why)`.
    static func brokenLinks(in page: String, root: String = root) throws -> [String] {
        let text = prose(try String(contentsOfFile: root + "/" + page, encoding: .utf8))
        let folder = (page as NSString).deletingLastPathComponent
        var broken: [String] = []
        for target in captures(#"\]\(([^)\s]+)(?:\s+"[^"]*")?\)"#, in: text) {
            if target.range(of: #"^[a-zA-Z][a-zA-Z0-9+.-]*:"#, options: .regularExpression) != nil { continue }
            let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
            let file = String(parts[0])
            let resolved =
                file.isEmpty
                ? root + "/" + page
                : URL(fileURLWithPath: root + "/" + folder).appendingPathComponent(file).standardizedFileURL.path
            guard FileManager.default.fileExists(atPath: resolved) else {
                broken.append("\(page): \(target) (no such file)")
                continue
            }
            if parts.count == 2, resolved.hasSuffix(".md") {
                let anchor = String(parts[1])
                if !(try anchors(ofPage: resolved)).contains(anchor) {
                    broken.append("\(page): \(target) (no heading with the anchor #\(anchor))")
                }
            }
        }
        return broken
    }

    @Test func slugsAreGitHubs() {
        #expect(Self.slug("Memory (`limits.memory`)") == "memory-limitsmemory")
        #expect(Self.slug("Re-runs: `plan` and `run --incremental`") == "re-runs-plan-and-run---incremental")
        #expect(Self.slug("What \"exactly once\" means") == "what-exactly-once-means")
    }

    @Test func everyRelativeLinkLeadsToAFileAndHeading() throws {
        let pages = try Self.markdownPages()
        #expect(pages.contains("docs/README.md"), "docs/README.md, the index, is missing")
        var broken: [String] = []
        for page in pages { broken += try Self.brokenLinks(in: page) }
        #expect(broken.isEmpty, "broken links:\n\(broken.joined(separator: "\n"))")
    }

    @Test func aBrokenLinkIsFound() throws {
        // The checker itself: a page with a missing file and a missing anchor.
        let directory = try TemporaryDirectory()
        try "# Other\n".write(toFile: directory.url("other.md"), atomically: true, encoding: .utf8)
        try
            "# Page\n\n## A heading\n\n[ok](#a-heading) [ok](other.md#other) [gone](nowhere.md) [bad](other.md#no-such-heading) `[code](x.md)`\n"
            .write(toFile: directory.url("page.md"), atomically: true, encoding: .utf8)
        let broken = try Self.brokenLinks(in: "page.md", root: directory.path)
        #expect(broken.count == 2, "\(broken)")
        #expect(broken.contains { $0.contains("nowhere.md") })
        #expect(broken.contains { $0.contains("#no-such-heading") })
    }

    // MARK: - pipelines in the docs

    /// Every pipeline file the README and docs/ show (a ```json block with a `"version"`),
    /// with the page it is on.
    static func documentedPipelines() throws -> [(page: String, text: String)] {
        var found: [(String, String)] = []
        for page in try markdownPages() where page == "README.md" || page.hasPrefix("docs/") {
            let text = try String(contentsOfFile: root + "/" + page, encoding: .utf8)
            for block in captures(#"(?s)```json\n(.*?)```"#, in: text) where block.contains("\"version\"") {
                found.append((page, block))
            }
        }
        return found
    }

    /// Each one passes `imgpipe validate` as written, beside a `photos/` folder (and one a
    /// level up, for the reference's `../photos`) and the training-set recipe's table (validate
    /// checks that a table can be read, not what it holds). Host names are swapped for 127.0.0.1
    /// (validate makes no request, but nothing here may leave loopback).
    @Test func everyDocumentedPipelineIsValid() throws {
        let pipelines = try Self.documentedPipelines()
        #expect(pipelines.count >= 4, "found \(pipelines.count) pipelines in the docs")
        let work = try TemporaryDirectory()
        let folder = try work.folder("job")
        for photos in [work.url("photos"), folder + "/photos"] {
            try FileManager.default.createDirectory(atPath: photos, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: Self.root + "/samples/rocket.jpg", toPath: photos + "/rocket.jpg")
        }
        try FileManager.default.createDirectory(atPath: folder + "/parts", withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: folder + "/parts/part-00000.parquet", contents: Data("PAR1".utf8))
        for (index, pipeline) in pipelines.enumerated() {
            let text = Self.replacing(
                #"(https?://)[A-Za-z0-9.-]+\.(com|example|internal)(:[0-9]+)?"#, in: pipeline.text, with: "$1127.0.0.1")
            let file = "pipeline-\(index).json"
            try text.write(toFile: folder + "/" + file, atomically: true, encoding: .utf8)
            let result = try ImgpipeBinary.run(["validate", file], in: folder)
            #expect(result.status == 0, "\(pipeline.page), pipeline \(index): \(result.stderr)")
        }
    }

    // MARK: - ARCHITECTURE.md's names

    /// Every `.swift`, `.c` and `.h` file of Sources/ and Tests/, as paths from the root.
    static let codeFiles: [String] = {
        var files: [String] = []
        for top in ["Sources", "Tests"] {
            guard let walker = FileManager.default.enumerator(atPath: root + "/" + top) else { continue }
            for case let path as String in walker
            where path.hasSuffix(".swift") || path.hasSuffix(".c") || path.hasSuffix(".h") || path.hasSuffix(".modulemap") {
                files.append(top + "/" + path)
            }
        }
        return files
    }()

    static let codeText: [String: String] = {
        var texts: [String: String] = [:]
        for file in codeFiles + ["Package.swift"] {
            texts[file] = try? String(contentsOfFile: root + "/" + file, encoding: .utf8)
        }
        return texts
    }()

    /// Every identifier of the code, read once.
    static let codeWords: Set<String> = Set(codeText.values.flatMap { captures(#"([A-Za-z_][A-Za-z0-9_]*)"#, in: $0) })

    /// Every name the Swift code declares: after `func`, `var`, `let`, `case` (each of a
    /// `case a, b` list), `struct`, `class`, `enum`, `protocol`, `typealias`, `actor`.
    static let declaredNames: Set<String> = {
        var names: Set<String> = []
        for (file, text) in codeText where file.hasSuffix(".swift") {
            names.formUnion(
                captures(
                    #"\b(?:func|var|let|case|struct|class|enum|protocol|typealias|actor)\s+`?([A-Za-z_][A-Za-z0-9_]*)"#, in: text)
            )
            for list in captures(#"\bcase\s+([^\n]*)"#, in: text) {
                names.formUnion(captures(#",\s*`?([A-Za-z_][A-Za-z0-9_]*)"#, in: list))
            }
        }
        return names
    }()

    static func occursAsWord(_ word: String) -> Bool { codeWords.contains(word) }

    static func declaresMember(_ name: String) -> Bool { declaredNames.contains(name) }

    static func declaresType(_ name: String, in text: String) -> Bool {
        let pattern =
            #"\b(struct|class|enum|protocol|typealias|actor)\s+"# + NSRegularExpression.escapedPattern(for: name) + #"\b"#
        return text.range(of: pattern, options: .regularExpression) != nil
    }

    /// The files and folders a path names: from the root, or as the tail of a path under
    /// Sources/ or Tests/ (`Run/RunStages.swift`, `Support/`).
    static func resolve(_ path: String) -> [String] {
        let trimmed = path.hasSuffix("/") ? String(path.dropLast()) : path
        if FileManager.default.fileExists(atPath: root + "/" + trimmed) { return [trimmed] }
        var found: Set<String> = []
        for file in codeFiles {
            if file.hasSuffix("/" + trimmed) { found.insert(file) }
            // A folder: a file below it.
            if let range = file.range(of: "/" + trimmed + "/") {
                found.insert(String(file[..<range.upperBound].dropLast()))
            }
        }
        return found.sorted()
    }

    /// What is wrong with one backticked span of ARCHITECTURE.md, or nil (fine or skipped).
    static func problem(with span: String) -> String? {
        let skipped = [" ", "<", "*", "=", "\"", "$", "{", "|", "'", ","]
        if span.isEmpty || skipped.contains(where: span.contains) || span.hasPrefix("-") || span.hasPrefix(".") {
            return nil
        }
        if span.contains("/") {
            // A path of the tree: from a top folder, to a code file, or from a folder of
            // Sources/ (`Run/`, capitalised); lower-case runtime folders (`spool/`) are not.
            let tops = ["Sources/", "Tests/", "bench/", "deploy/", "pipelines/", "samples/", "docs/"]
            let isPath = span.range(of: #"^[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*/?$"#, options: .regularExpression) != nil
            let isTreePath =
                tops.contains(where: span.hasPrefix) || span.range(of: #"\.(swift|c|h)$"#, options: .regularExpression) != nil
                || span.first?.isUppercase == true
            guard isPath, isTreePath else { return nil }
            return resolve(span).isEmpty ? "no file or folder \(span) in the tree" : nil
        }
        if span.range(of: #"^[A-Za-z0-9_+-]+\.(swift|c|h)$"#, options: .regularExpression) != nil {
            let found = codeFiles.contains { ($0 as NSString).lastPathComponent == span }
            return found ? nil : "no file named \(span)"
        }
        // Other files by name (`README.md`, `job.yaml`): not code names.
        if span.range(of: #"\.(md|json|jsonl|csv|txt|sqlite|yaml|yml|html|sh|py|gz)$"#, options: .regularExpression) != nil {
            return nil
        }
        // `Type.member(labels:)`, `Type.member`, `Type.Nested`, `Type.Nested.member`.
        if span.range(of: #"^[A-Z][A-Za-z0-9]*(\.[A-Za-z_][A-Za-z0-9_]*)+(\(.*\))?$"#, options: .regularExpression) != nil {
            let type = captures(#"^([A-Z][A-Za-z0-9]*)\."#, in: span)[0]
            let member = captures(#"\.([A-Za-z_][A-Za-z0-9_]*)(\(.*\))?$"#, in: span)[0]
            guard occursAsWord(type) else { return "no type \(type) in the code (\(span))" }
            if member == "init" { return nil }
            return declaresMember(member) ? nil : "no member \(member) declared (\(span))"
        }
        // `name()`, `name(labels:)`.
        if span.range(of: #"^[a-z][A-Za-z0-9_]*\(.*\)$"#, options: .regularExpression) != nil {
            let name = captures(#"^([a-z][A-Za-z0-9_]*)\("#, in: span)[0]
            // Declared in Swift, or a C function the C files define or call.
            let cCalls = codeText.filter { !$0.key.hasSuffix(".swift") }.values.contains { $0.contains(name + "(") }
            return declaresMember(name) || cCalls ? nil : "no function \(name) declared (\(span))"
        }
        // `TypeName`, not all capitals.
        if span.range(of: #"^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$"#, options: .regularExpression) != nil {
            return occursAsWord(span) ? nil : "no \(span) in the code"
        }
        return nil
    }

    /// "`Type` (in `File.swift`)" where the file does not declare the type.
    static func misplacedTypes(in text: String) -> [String] {
        var problems: [String] = []
        guard let expression = try? NSRegularExpression(pattern: #"`([A-Z][A-Za-z0-9]*)` \(in `([^`]+\.swift)`"#) else {
            return []
        }
        for match in expression.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
            guard let typeRange = Range(match.range(at: 1), in: text), let fileRange = Range(match.range(at: 2), in: text)
            else { continue }
            let type = String(text[typeRange])
            let file = String(text[fileRange])
            let declared = resolve(file).contains { declaresType(type, in: codeText[$0] ?? "") }
            if !declared { problems.append("\(type) is said to be in \(file), which does not declare it") }
        }
        return problems
    }

    /// The target table's C modules "imported only by `Target`, in `File.swift`": each file
    /// named imports the module, and no other file of that target does.
    static func wrongImporters(in text: String) -> [String] {
        var problems: [String] = []
        for line in text.split(separator: "\n") where line.hasPrefix("| `C") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 3, let module = captures(#"^`(C[A-Za-z]+)`$"#, in: cells[0]).first else { continue }
            let last = cells[cells.count - 1]
            guard let target = captures(#"imported (?:only )?by `([A-Za-z]+)`, in "#, in: last).first else { continue }
            let named = captures(#"`([^`]+\.swift)`"#, in: last)
            let importers = codeFiles.filter {
                $0.hasPrefix("Sources/\(target)/")
                    && (codeText[$0] ?? "").range(of: #"(?m)^import \#(module)$"#, options: .regularExpression) != nil
            }
            for file in named where !resolve(file).contains(where: importers.contains) {
                problems.append("\(module) is said to be imported in \(file), which does not import it")
            }
            if last.contains("only") {
                for importer in importers where !named.contains(where: { importer.hasSuffix("/" + $0) }) {
                    problems.append("\(module) is imported by \(importer) too, which the table does not name")
                }
            }
        }
        return problems
    }

    /// "`Folder/` (`A.swift`, `B.swift`)" that is not the folder's whole list of files, or
    /// "`Folder/` (`TypeA`, `TypeB`)" naming a type the folder does not declare.
    static func folderLists(in text: String) -> [String] {
        var problems: [String] = []
        guard let expression = try? NSRegularExpression(pattern: #"`([A-Za-z0-9]+/)` \(((?:`[^`]+`(?:, )?)+)[^)]*\)"#)
        else { return [] }
        for match in expression.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
            guard let folderRange = Range(match.range(at: 1), in: text), let listRange = Range(match.range(at: 2), in: text)
            else { continue }
            let folder = String(text[folderRange])
            let names = captures(#"`([^`]+)`"#, in: String(text[listRange]))
            // A folder of the two pipeline targets (`Sources/PipelineKit/Feeds/`, `Sources/ImagePipeline/Run/`).
            let folders = resolve(folder).filter {
                $0.hasPrefix("Sources/PipelineKit/") || $0.hasPrefix("Sources/ImagePipeline/")
            }
            guard let path = folders.first else { continue }
            let files = codeFiles.filter { $0.hasPrefix(path + "/") }
            if names.allSatisfy({ $0.hasSuffix(".swift") }) {
                let listed = Set(names)
                let present = Set(files.map { ($0 as NSString).lastPathComponent })
                if listed != present {
                    problems.append(
                        "\(folder) is listed as \(listed.sorted()), but holds \(present.sorted())")
                }
            } else {
                for name in names where name.first?.isUppercase == true {
                    if !files.contains(where: { declaresType(name, in: codeText[$0] ?? "") }) {
                        problems.append("\(folder) is said to hold \(name), which no file there declares")
                    }
                }
            }
        }
        return problems
    }

    static func architectureProblems(_ architecture: String) -> [String] {
        var text = ""
        var fenced = false
        for line in architecture.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") { fenced.toggle() }
            if !fenced { text += line + "\n" }
        }
        var problems = Set(captures(#"`([^`\n]+)`"#, in: text).compactMap(problem(with:)))
        problems.formUnion(misplacedTypes(in: text))
        problems.formUnion(wrongImporters(in: text))
        problems.formUnion(folderLists(in: text))
        return problems.sorted()
    }

    @Test func everyNameInTheArchitectureIsInTheCode() throws {
        let architecture = try String(contentsOfFile: Self.root + "/ARCHITECTURE.md", encoding: .utf8)
        let problems = Self.architectureProblems(architecture)
        #expect(problems.isEmpty, "ARCHITECTURE.md:\n\(problems.joined(separator: "\n"))")
    }

    @Test func namesThatAreNotInTheCodeAreFound() {
        // Made at run time: this file is part of the code searched and must not hold them.
        let absent = "absent\(getpid())x"
        let made = """
            `Type\(absent)` and `PipelineSpec.\(absent)Member` in `Run/\(absent)File.swift`; \
            `\(absent)Function()`; `RunStages` (in `Sinks/Sink.swift`); `Support/` (`Hex.swift`).
            | `CZlib` | system library | — (imported only by `PipelineKit`, in `Feeds/URLListFeed.swift`) |
            Fine: `PipelineSpec`, `RunStages.drive`, `acquireSlot()`, `Sources/CVips/shim.h`, `limits.memory`, `run --new`.
            """
        let problems = Self.architectureProblems(made)
        #expect(problems.count == 9, "\(problems.joined(separator: "\n"))")
        for expected in [
            "Type\(absent)", "\(absent)Member", "\(absent)File.swift", "\(absent)Function", "RunStages is said",
            "Support/ is listed", "Feeds/URLListFeed.swift, which does not import", "ListFileLines.swift too",
            "TableFeed+Parquet.swift too",
        ] {
            #expect(problems.contains { $0.contains(expected) }, "nothing about \(expected): \(problems)")
        }
    }
}
