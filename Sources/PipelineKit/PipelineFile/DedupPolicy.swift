/// `"dedup"`: which repeats of the feed a run leaves out. An item that repeats an earlier
/// item the run kept is `skipped` with reason `duplicate`, naming that item; the first item
/// of each group, in feed order, is the one kept.
///
/// - `exact`: the same input bytes (SHA-256).
/// - `similar`: a 64-bit perceptual hash (`PerceptualHash`, of the item's first output)
///   within `distance` bits of a kept item's: resized, re-encoded and slightly retouched
///   copies.
public struct DedupPolicy: Sendable, Equatable {
    public var exact = false
    /// The largest Hamming distance between two perceptual hashes that counts as the same
    /// picture; nil: near duplicates are not looked for.
    public var similarDistance: Int?

    /// `"similar": true`'s distance. Measured on the bench corpus (docs/dedup.md): resized,
    /// re-encoded and brightened copies of a photo lie within 6 bits of it, distinct photos
    /// and scenes more than 12 apart.
    public static let defaultDistance = 8
    /// The largest distance `similar` takes: beyond it the hash no longer tells pictures apart.
    public static let maxDistance = 16

    public init(exact: Bool = false, similarDistance: Int? = nil) {
        self.exact = exact
        self.similarDistance = similarDistance
    }

    /// Whether the run looks for duplicates at all.
    public var isOn: Bool { exact || similarDistance != nil }

    package init(node: SpecNode) throws {
        let object = try node.object(allowing: ["exact", "similar"])
        self.init()
        exact = try object.optional("exact", default: false) { try $0.bool() }
        similarDistance = try object.optional("similar", default: nil) { node -> Int? in
            if case .bool(let on) = node.value { return on ? Self.defaultDistance : nil }
            guard case .object = node.value else {
                throw node.expected("true, false or {\"distance\": N} (N from 0 to \(Self.maxDistance))")
            }
            let similar = try node.object(allowing: ["distance"])
            return try similar.optional("distance", default: Self.defaultDistance) {
                try $0.integer(in: 0...Self.maxDistance)
            }
        }
    }

    /// The schema of `"dedup"`.
    static var schema: JSONValue {
        PipelineSchema.object([
            ("exact", .object([("type", .string("boolean")), ("default", .bool(false))])),
            (
                "similar",
                .object([
                    (
                        "oneOf",
                        .array([
                            .object([("type", .string("boolean"))]),
                            PipelineSchema.object([
                                ("distance", PipelineSchema.integerSchema(0...maxDistance))
                            ]),
                        ])
                    )
                ])
            ),
        ])
    }
}
