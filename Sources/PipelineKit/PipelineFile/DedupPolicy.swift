/// `"dedup"`: which repeats of the feed a run leaves out. An item that repeats an earlier
/// item the run kept is `skipped` with reason `duplicate`, naming that item; the first item
/// of each group, in feed order, is the one kept.
///
/// - `exact`: the same input bytes (SHA-256).
/// - `similar`: a 64-bit perceptual hash (`PerceptualHash`, of the item's first output)
///   within `distance` bits of a kept item's: resized, re-encoded and slightly retouched
///   copies.
/// - `placeholders`: bytes one host has served for `after` different URLs of the run are
///   that host's placeholder (a "photo unavailable" picture): the item that shows it so is
///   skipped as `placeholder`, and so is every later one; the earlier ones are flagged.
public struct DedupPolicy: Sendable, Equatable {
    public var exact = false
    /// The largest Hamming distance between two perceptual hashes that counts as the same
    /// picture; nil: near duplicates are not looked for.
    public var similarDistance: Int?
    /// How many different URLs of one host must give the same bytes for them to be the
    /// host's placeholder; nil: placeholders are not looked for.
    public var placeholdersAfter: Int?

    /// `"similar": true`'s distance. Measured on the shipped photos and synthetic scenes
    /// (docs/dedup.md): resized, re-encoded and brightened copies lay within 4 bits of their
    /// original, distinct pictures 16 or more apart.
    public static let defaultDistance = 8
    /// The largest distance `similar` takes: beyond it the hash no longer tells pictures apart.
    public static let maxDistance = 16
    /// `"placeholders": true`'s number of URLs.
    public static let defaultSightings = 3
    /// The most `placeholders.after` takes (the state file keeps the keys of the first
    /// sightings, to flag them).
    public static let maxSightings = 16

    public init(exact: Bool = false, similarDistance: Int? = nil, placeholdersAfter: Int? = nil) {
        self.exact = exact
        self.similarDistance = similarDistance
        self.placeholdersAfter = placeholdersAfter
    }

    /// Whether the run looks for duplicates or placeholders at all.
    public var isOn: Bool { exact || similarDistance != nil || placeholdersAfter != nil }

    package init(node: SpecNode) throws {
        let object = try node.object(allowing: ["exact", "similar", "placeholders"])
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
        placeholdersAfter = try object.optional("placeholders", default: nil) { node -> Int? in
            if case .bool(let on) = node.value { return on ? Self.defaultSightings : nil }
            guard case .object = node.value else {
                throw node.expected("true, false or {\"after\": N} (N from 2 to \(Self.maxSightings))")
            }
            return try node.object(allowing: ["after"]).optional("after", default: Self.defaultSightings) {
                try $0.integer(in: 2...Self.maxSightings)
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
            (
                "placeholders",
                .object([
                    (
                        "oneOf",
                        .array([
                            .object([("type", .string("boolean"))]),
                            PipelineSchema.object([("after", PipelineSchema.integerSchema(2...maxSightings))]),
                        ])
                    )
                ])
            ),
        ])
    }
}
