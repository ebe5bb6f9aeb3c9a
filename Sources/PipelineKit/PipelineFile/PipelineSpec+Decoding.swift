import Foundation

extension PipelineSpec {
    static let topLevelKeys = [
        "version", "name", "source", "filters", "output", "outputs", "sink", "sinks", "limits", "retry",
        "userAgent", "accept", "network", "dedup",
    ]

    /// Reads and validates a pipeline file. Errors are `SpecError`s naming the JSON path
    /// (syntax errors, invalid UTF-8 and NUL in strings: the path, line and column) or the file.
    public static func load(path: String, registry: FilterRegistry = .standard) throws -> PipelineSpec {
        let url = URL(fileURLWithPath: path)
        let bytes: [UInt8]
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) else {
            throw SpecError(path: "", message: "no such file")
        }
        guard !isFolder.boolValue else {
            throw SpecError(path: "", message: "a folder, not a pipeline file (give the JSON file in it)")
        }
        do {
            bytes = Array(try Data(contentsOf: url))
        } catch {
            throw SpecError(path: "", message: "cannot read the pipeline file: \(String(cString: strerror(errno)))")
        }
        let document: JSONValue
        do {
            document = try JSONParser.parse(bytes: bytes)
        } catch let error as JSONSyntaxError {
            throw SpecError(path: error.path, message: "invalid JSON at \(error)")
        }
        let base = url.deletingLastPathComponent().standardizedFileURL.path
        let stem = url.deletingPathExtension().lastPathComponent
        return try decode(document, baseDirectory: base, defaultName: stem, registry: registry)
    }

    /// Reads and validates a pipeline given as text (a syntax error is a `JSONSyntaxError`).
    public static func decode(text: String, baseDirectory: String, defaultName: String) throws -> PipelineSpec {
        try decode(try JSONParser.parse(text), baseDirectory: baseDirectory, defaultName: defaultName)
    }

    /// Validates a parsed document.
    public static func decode(
        _ document: JSONValue, baseDirectory: String, defaultName: String,
        registry: FilterRegistry = .standard
    ) throws -> PipelineSpec {
        let root = try SpecNode(value: document, path: .root).object(allowing: topLevelKeys)
        let version = try root.required("version") { node in try node.integer(in: 1...Int.max) }
        guard version == currentVersion else {
            throw SpecError(
                path: "version", message: "unsupported version \(version); this imgpipe reads version \(currentVersion)")
        }
        let name = try root.optional("name", default: defaultName) { try $0.nonEmptyString() }
        let source = try root.required("source") { try SourceSpec(node: $0) }
        let filters = try root.optional("filters", default: []) { node in
            try node.array().map { try registry.decode($0) }
        }
        let outputs = try decodeOutputs(root, registry: registry)

        if root.has("sink"), root.has("sinks") {
            throw SpecError(path: "sink", message: "give either \"sink\" (one sink) or \"sinks\" (a list), not both")
        }
        var sinkNodes: [SpecNode] = []
        if let single = root.member("sink") {
            sinkNodes = [single]
        } else if let list = root.member("sinks") {
            sinkNodes = try list.array()
        }
        var sinks: [SinkSpec] = []
        var sinkOutputs: [String: [String]] = [:]
        var unpacedSinks: Set<String> = []
        for (index, node) in sinkNodes.enumerated() {
            let (rest, chosen) = try takeSinkOutputs(node, ids: outputs.map(\.id))
            let (sinkNode, paced) = try takeSinkPacing(rest)
            let sink = try SinkSpec(node: sinkNode, index: index)
            sinks.append(sink)
            if let chosen { sinkOutputs[sink.name] = chosen }
            if !paced { unpacedSinks.insert(sink.name) }
            // Each output of an item is its own request or object: the URL or key must tell
            // them apart.
            if (chosen?.count ?? outputs.count) > 1 { try sink.parameters.checkSeveralOutputs(entry: node) }
        }
        guard !sinks.isEmpty else {
            throw SpecError(
                path: "sinks",
                message: "missing (a pipeline needs at least one sink, e.g. {\"type\": \"directory\", \"path\": \"out\"})")
        }
        var seen: Set<String> = []
        for (index, sink) in sinks.enumerated() where !seen.insert(sink.name).inserted {
            throw SpecError(path: "sinks[\(index)].name", message: "duplicate sink name \(JSONValue.quote(sink.name))")
        }
        let limits = try root.optional("limits", default: Limits()) { try Limits(node: $0) }
        let retry = try root.optional("retry", default: RetryPolicy()) { try RetryPolicy(node: $0) }
        let userAgent = try root.optional("userAgent", default: ImgpipeIdentity.defaultUserAgent) { node in
            let text = try node.nonEmptyString()
            // A header value: a line break would start a header of its own.
            guard text.unicodeScalars.allSatisfy({ (0x20...0x7E).contains($0.value) }) else {
                throw node.expected("printable ASCII (a header value), e.g. \"mybot/1.0 (+mailto:ops@example.com)\"")
            }
            // Sent as written: a `${NAME}` here would go out literally, so it is refused.
            guard !text.contains("${") else {
                throw node.expected("the user agent as it is sent (no ${NAME}: the environment is not read here)")
            }
            return text
        }
        let accept = try root.optional("accept", default: AcceptRules()) { try AcceptRules(node: $0) }
        let network = try root.optional("network", default: AddressPolicy()) { try AddressPolicy(node: $0) }
        var spec = PipelineSpec(
            version: version, name: name, source: source, filters: filters, outputs: outputs,
            sinks: sinks, sinkOutputs: sinkOutputs, unpacedSinks: unpacedSinks, limits: limits, retry: retry,
            userAgent: userAgent,
            accept: accept, baseDirectory: baseDirectory, document: document)
        spec.network = network
        spec.dedup = try root.optional("dedup", default: DedupPolicy()) { try DedupPolicy(node: $0) }
        return spec
    }

    /// `"output"` (one output, id `default` unless it names one) or `"outputs"` (a list of
    /// one or more, each with an id when there are several, ids unique, names that cannot
    /// be the same for two outputs).
    static func decodeOutputs(_ root: SpecObject, registry: FilterRegistry) throws -> [OutputSpec] {
        if root.has("output"), root.has("outputs") {
            throw SpecError(path: "outputs", message: "give either \"output\" (one output) or \"outputs\" (a list), not both")
        }
        guard let list = root.member("outputs") else {
            return [
                try root.optional("output", default: OutputSpec()) {
                    try OutputSpec(node: $0, registry: registry, several: false)
                }
            ]
        }
        let nodes = try list.array()
        guard !nodes.isEmpty else { throw list.fail("empty (give at least one output, or use \"output\")") }
        let outputs = try nodes.map { try OutputSpec(node: $0, registry: registry, several: nodes.count > 1) }
        var seen: [String: Int] = [:]
        for (index, output) in outputs.enumerated() {
            if let first = seen[output.id] {
                throw SpecError(
                    path: "outputs[\(index)].id",
                    message: "duplicate output id \(JSONValue.quote(output.id)) (also outputs[\(first)])")
            }
            seen[output.id] = index
        }
        // Two outputs whose names could be equal would overwrite each other in a folder.
        for (index, output) in outputs.enumerated() {
            for (otherIndex, other) in outputs.enumerated().prefix(index)
            where output.formats.contains(where: { mine in
                other.formats.contains { output.name.mayEqual(other.name, mine, $0) }
            }) {
                throw SpecError(
                    path: "outputs[\(index)].name",
                    message: "outputs \(JSONValue.quote(other.id)) and \(JSONValue.quote(output.id)) can get the same file name "
                        + "(\(JSONValue.quote(output.name.raw))): put {output} in the names, e.g. \"\(NameTemplate.standardOfSeveral.raw)\" "
                        + "(outputs[\(otherIndex)])")
            }
        }
        return outputs
    }

    /// A sink's `"pacing"` (`"on"`, the default, or `"off"`), taken out of its node like
    /// `"outputs"`: true when the sink's requests are paced. A folder sink sends none.
    static func takeSinkPacing(_ node: SpecNode) throws -> (SpecNode, Bool) {
        guard case .object(var members) = node.value, let index = members.firstIndex(where: { $0.key == "pacing" }) else {
            return (node, true)
        }
        let pacingNode = SpecNode(value: members[index].value, path: node.path.appending("pacing"))
        if let type = try? SpecObject.type(of: node), let kind = SinkRegistry.standard.kind(named: type),
            !kind.sendsRequests
        {
            throw pacingNode.fail("a \(type) sink sends no requests to pace; leave \"pacing\" out")
        }
        let paced = try pacingNode.pacing()
        members.remove(at: index)
        return (SpecNode(value: .object(members), path: node.path), paced)
    }

    /// A sink's `"outputs"` (ids of outputs it takes), taken out of its node so that the
    /// sink's own decoding never sees it.
    static func takeSinkOutputs(_ node: SpecNode, ids: [String]) throws -> (SpecNode, [String]?) {
        guard case .object(let members) = node.value, let index = members.firstIndex(where: { $0.key == "outputs" }) else {
            return (node, nil)
        }
        let listNode = SpecNode(value: members[index].value, path: node.path.appending("outputs"))
        let items = try listNode.array()
        guard !items.isEmpty else { throw listNode.fail("empty (leave \"outputs\" out to take every output)") }
        var chosen: [String] = []
        for item in items {
            let id = try item.string()
            guard ids.contains(id) else {
                let hint = Spelling.closest(to: id, in: ids).map { " (did you mean \"\($0)\"?)" } ?? ""
                throw item.fail(
                    "no output \(JSONValue.quote(id))\(hint); the outputs are " + ids.map(JSONValue.quote).joined(separator: ", ")
                )
            }
            if !chosen.contains(id) { chosen.append(id) }
        }
        var rest = members
        rest.remove(at: index)
        return (SpecNode(value: .object(rest), path: node.path), chosen)
    }
}

extension SourceSpec {
    /// A fallback source may not have a fallback of its own (`allowFallback` false).
    package init(node: SpecNode, allowFallback: Bool = true, registry: SourceRegistry = .standard) throws {
        guard case .object = node.value else { throw node.expected("an object with a \"type\"") }
        let type = try SpecObject.type(of: node)
        guard let kind = registry.kind(named: type) else {
            throw SpecError(
                path: node.path.appending("type").description,
                message: "expected one of \(registry.typeNames.joined(separator: ", ")), got \(JSONValue.quote(type))")
        }
        if !allowFallback, let refusal = kind.fallbackRefusal {
            throw SpecError(path: node.path.appending("type").description, message: refusal)
        }
        let keys = kind.properties + kind.remoteProperties(fallback: allowFallback)
        parameters = try kind.init(try node.object(allowing: ["type"] + keys.map(\.key)))
    }
}

extension RemoteOptions {
    package init(_ object: SpecObject) throws {
        self.init()
        if let cache = object.member("cache") {
            switch cache.value {
            case .bool(let on): self.cache = on ? CacheSpec() : nil
            case .object:
                let fields = try cache.object(allowing: ["path", "revalidate", "maxSize"])
                self.cache = CacheSpec(
                    path: try fields.optional("path") { try EnvString($0) },
                    revalidate: try fields.optional("revalidate", default: false) { try $0.bool() },
                    maxSize: try fields.optional("maxSize", default: CacheSpec.defaultMaxSize) {
                        try $0.integer(in: 1...Int.max)
                    })
            default:
                throw cache.expected("true, false or an object with path, revalidate, maxSize")
            }
        }
        fallback = try object.optional("fallback") { try SourceSpec(node: $0, allowFallback: false) }
        respectOptOut = try object.optional("respectOptOut", default: true) { try $0.bool() }
        optOutHostAfter = try object.optional("optOutHostAfter", default: RemoteOptions.defaultOptOutHostAfter) {
            try $0.integer(in: 0...1_000_000)
        }
        robots = try object.optional("robots", default: false) { try $0.bool() }
        versionField = try object.optional("versionField") { try $0.nonEmptyString() }
        paced = try object.optional("pacing", default: true) { try $0.pacing() }
        // Only the sources that read feed pages allow the key (their `properties`).
        maxPageBytes = try object.optional("maxPageBytes", default: RemoteOptions.defaultMaxPageBytes) {
            try $0.integer(in: 1...RemoteOptions.largestMaxPageBytes)
        }
    }
}

extension SinkSpec {
    package init(node: SpecNode, index: Int, registry: SinkRegistry = .standard) throws {
        guard case .object = node.value else { throw node.expected("an object with a \"type\"") }
        let type = try SpecObject.type(of: node)
        guard let kind = registry.kind(named: type) else {
            throw SpecError(
                path: node.path.appending("type").description,
                message: "expected one of \(registry.typeNames.joined(separator: ", ")), got \(JSONValue.quote(type))")
        }
        let object = try node.object(allowing: ["type", "name"] + kind.properties.map(\.key))
        name = try object.optional("name", default: "\(type)-\(index)") { try $0.nonEmptyString() }
        parameters = try kind.init(object)
    }
}

extension SpecNode {
    /// Form fields or headers: names are free, but a `//…` key is a comment here too,
    /// and a header is a token with a value on one line (no header can smuggle another).
    /// `reserved` are the headers imgpipe sets itself (compared without case), which a
    /// second line of the same name would contradict; a name given twice in two cases
    /// is refused as well (both lines would be sent).
    func namedValues(headers: Bool = false, reserved: [String: String] = [:]) throws -> [NamedValue] {
        guard case .object(let members) = value else { throw expected("an object of strings") }
        var seen: [String: String] = [:]
        return try members.filter { !$0.key.hasPrefix("//") }.map { member in
            let valueNode = SpecNode(value: member.value, path: path.appending(member.key))
            if headers {
                let token = CharacterSet(
                    charactersIn: "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
                guard !member.key.isEmpty, member.key.unicodeScalars.allSatisfy(token.contains) else {
                    throw valueNode.fail("not a header name (letters, digits and !#$%&'*+-.^_`|~ only)")
                }
                if try !valueNode.string().isOneHeaderLine {
                    throw valueNode.fail("a header value is one line: no CR, LF or NUL")
                }
                if let why = reserved[member.key.lowercased()] {
                    throw valueNode.fail("imgpipe sets \(member.key) itself (\(why)); leave it out")
                }
                if let earlier = seen.updateValue(member.key, forKey: member.key.lowercased()) {
                    throw valueNode.fail("the header \(earlier) is given twice (header names are compared without case)")
                }
            }
            return NamedValue(name: member.key, value: try EnvString(valueNode))
        }
    }
}

extension OutputSpec {
    /// An output id: lower-case letters, digits and `-`.
    static func isValidID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D }
    }

    /// One output; `several` when the pipeline has more than one (an id is then required,
    /// and the default name has `{output}` in it).
    package init(node: SpecNode, registry: FilterRegistry = .standard, several: Bool = false) throws {
        let object = try node.object(allowing: [
            "id", "filters", "format", "formats", "quality", "maxBytes", "minQuality", "strip", "progressive", "compression",
            "lossless", "effort", "animation", "name",
        ])
        self.init()
        if several, !object.has("id") {
            throw SpecError(
                path: object.path.appending("id").description,
                message: "missing (each of several outputs needs an id, e.g. \"id\": \"small\")")
        }
        id = try object.optional("id", default: id) { node in
            let text = try node.string()
            guard OutputSpec.isValidID(text) else {
                throw node.expected("an id of lower-case letters, digits and -, e.g. \"w640\"")
            }
            return text
        }
        filters = try object.optional("filters", default: []) { node in try node.array().map { try registry.decode($0) } }
        if let node = object.member("format"), case .string(let text) = node.value, text.lowercased() == "best" {
            let candidates = OutputSpec.bestCandidates.map(\.rawValue)
            let chosen = try object.optional("formats", default: OutputSpec.bestDefault) { node in
                let listed = try node.array().map { OutputFormat(rawValue: try $0.choice(candidates))! }
                guard !listed.isEmpty, Set(listed).count == listed.count else {
                    throw node.expected("a list of different formats among \(candidates.joined(separator: ", "))")
                }
                guard listed.contains(where: \.keepsAlpha) else {
                    throw node.fail(
                        "lists no format that keeps transparency (avif, webp or png): an image with it would have none")
                }
                return listed
            }
            bestOf = chosen
            format = chosen[0]
        } else {
            format = try object.optional("format", default: .jpeg) { node in
                OutputFormat(rawValue: try node.choice(OutputFormat.allCases.map(\.rawValue) + ["best"]))!
            }
            if object.has("formats") {
                throw SpecError(
                    path: object.path.appending("formats").description, message: "used only with \"format\": \"best\"")
            }
        }
        let used = formats
        func only(_ key: String, for applying: [OutputFormat]) throws {
            if object.has(key), !used.contains(where: applying.contains) {
                let named = formatDescription
                throw SpecError(
                    path: object.path.appending(key).description,
                    message: "not used by \(named) (it applies to \(applying.map(\.rawValue).joined(separator: ", ")))")
            }
        }
        try only("quality", for: [.jpeg, .webp, .avif])
        try only("maxBytes", for: [.jpeg, .webp, .avif])
        try only("minQuality", for: [.jpeg, .webp, .avif])
        try only("progressive", for: [.jpeg])
        try only("compression", for: [.png])
        try only("lossless", for: [.webp])
        try only("effort", for: [.webp, .avif])
        try only("animation", for: OutputFormat.animating)
        if let node = object.member("quality"), case .object = node.value {
            // A target instead of a number: the quality is searched per image.
            let target = try node.object(allowing: ["ssim"])
            ssimTarget = try target.required("ssim") { try $0.number(in: 0.5...0.9999) }
        } else {
            quality = try object.optional("quality", default: quality) { node in
                guard case .number = node.value else {
                    throw node.expected("a quality 1…100 or a target such as { \"ssim\": 0.97 }")
                }
                return try node.integer(in: 1...100)
            }
        }
        maxBytes = try object.optional("maxBytes") { try $0.integer(in: 1...Int.max) }
        minQuality = try object.optional("minQuality", default: minQuality) { try $0.integer(in: 1...100) }
        if object.has("minQuality"), !searchesQuality {
            throw SpecError(
                path: object.path.appending("minQuality").description,
                message: "used only with a quality target (\"quality\": { \"ssim\": 0.97 }) or maxBytes")
        }
        if maxBytes != nil, ssimTarget == nil {
            // A number beside a budget is its ceiling; without one, the budget may go to 100.
            if !object.has("quality") { quality = QualitySearch.highest }
            // The default floor goes no higher than the ceiling the file gives.
            if !object.has("minQuality") { minQuality = min(minQuality, quality) }
            if minQuality > quality {
                throw SpecError(
                    path: object.path.appending("minQuality").description,
                    message: "\(minQuality) is above quality \(quality), the highest the budget may choose")
            }
        }
        strip = try object.optional("strip", default: strip) { try $0.bool() }
        progressive = try object.optional("progressive", default: progressive) { try $0.bool() }
        compression = try object.optional("compression", default: compression) { try $0.integer(in: 0...9) }
        lossless = try object.optional("lossless", default: lossless) { try $0.bool() }
        if lossless, searchesQuality {
            let key = ssimTarget != nil ? "quality" : "maxBytes"
            throw SpecError(
                path: object.path.appending(key).description,
                message: "lossless WebP has no quality to choose; drop \"lossless\" or \"\(key)\"")
        }
        // WebP's encoder goes to 6, AVIF's to 9 (a WebP of `"best"` is capped at 6).
        effort = try object.optional("effort", default: effort) { try $0.integer(in: 0...(used.contains(.avif) ? 9 : 6)) }
        keepsAnimation = try object.optional("animation", default: keepsAnimation) { try $0.choice(["keep", "first"]) == "keep" }
        name = try object.optional("name", default: several ? NameTemplate.standardOfSeveral : NameTemplate.standard) {
            try NameTemplate($0)
        }
    }
}

extension Limits {
    package init(node: SpecNode) throws {
        let object = try node.object(allowing: [
            "downloads", "workers", "uploads", "timeout", "maxBytes", "maxPixels", "maxFrames",
            "memory", "rate", "burst",
        ])
        self.init()
        downloads = try object.optional("downloads", default: downloads) { try $0.integer(in: 1...1024) }
        workers = try object.optional("workers", default: workers) { try $0.integer(in: 0...1024) }
        uploads = try object.optional("uploads", default: uploads) { try $0.integer(in: 1...1024) }
        timeout = try object.optional("timeout", default: timeout) { try $0.number(in: 0.001...86400) }
        maxBytes = try object.optional("maxBytes", default: maxBytes) { try $0.integer(in: 1...Int.max) }
        maxPixels = try object.optional("maxPixels", default: maxPixels) { try $0.integer(in: 1...Int.max) }
        maxFrames = try object.optional("maxFrames", default: maxFrames) { try $0.integer(in: 1...1_000_000) }
        memory = try object.optional("memory", default: nil) { try $0.integer(in: 16...1 << 30) }
        rate = try object.optional("rate", default: nil) { try $0.number(in: 0.001...1_000_000) }
        burst = try object.optional("burst", default: nil) { try $0.integer(in: 1...1000) }
    }
}

extension AcceptRules {
    static let formatNames = ImageFormat.allCases.map(\.rawValue)

    package init(node: SpecNode) throws {
        let object = try node.object(allowing: ["minWidth", "minHeight", "maxAspect", "minBytes", "formats"])
        self.init()
        minWidth = try object.optional("minWidth") { try $0.integer(in: 1...Int.max) }
        minHeight = try object.optional("minHeight") { try $0.integer(in: 1...Int.max) }
        maxAspect = try object.optional("maxAspect") { try $0.number(in: 1...1_000_000) }
        minBytes = try object.optional("minBytes") { try $0.integer(in: 1...Int.max) }
        formats = try object.optional("formats") { node in
            let list = try node.array()
            guard !list.isEmpty else {
                throw node.expected("a non-empty list of formats (\(Self.formatNames.joined(separator: ", ")))")
            }
            return try list.map { ImageFormat(rawValue: try $0.choice(Self.formatNames))! }
        }
    }
}

extension RetryPolicy {
    package init(node: SpecNode) throws {
        let object = try node.object(allowing: ["attempts", "backoff"])
        self.init()
        attempts = try object.optional("attempts", default: attempts) { try $0.integer(in: 1...100) }
        backoff = try object.optional("backoff", default: backoff) { try $0.number(in: 0...3600) }
    }
}

extension SpecObject {
    /// The `type` member of a source or sink, read before the keys are checked (which keys
    /// are allowed depends on it).
    package static func type(of node: SpecNode) throws -> String {
        guard let type = node.value["type"] else {
            throw SpecError(path: node.path.appending("type").description, message: "missing (required)")
        }
        return try SpecNode(value: type, path: node.path.appending("type")).string()
    }
}

extension String {
    /// Whether S3 takes this as an `x-amz-meta-…` value: ASCII on one line. Checked as
    /// written and after `${…}`.
    var isS3MetadataValue: Bool { allSatisfy { $0.isASCII && !$0.isNewline } }

    /// Whether this can be a header value as it is: no CR, LF or NUL, which would end the
    /// header (and start another) or the request. Checked as written and after `${…}`.
    var isOneHeaderLine: Bool {
        !unicodeScalars.contains { $0 == "\r" || $0 == "\n" || $0 == "\0" }
    }
}
