/// One kind of sink, described once: the `type` that names it in a pipeline file, the keys
/// its entry takes (decoded with the strict readers of `SpecNode`, whose errors name the
/// JSON path), their JSON Schema, and how its `Sink` is made for a run. A value is the
/// decoded entry. Adding a kind is one conforming type in `Sinks/Kinds/` and one line in
/// `SinkRegistry.standard`; `validate`, `schema` and the docs' table follow from there.
public protocol SinkParameters: Sendable, Equatable {
    /// The `type` of the entry, e.g. `"directory"`.
    static var typeName: String { get }
    /// The kind's own keys with their JSON Schema, in the order an unknown key's message
    /// lists them; `type`, `name`, `outputs` and `pacing` are every sink's.
    static var properties: [(key: String, value: JSONValue)] { get }
    /// The own keys that must be given.
    static var required: [String] { get }
    /// Whether the sink sends requests (and so takes `"pacing"`); true unless said.
    static var sendsRequests: Bool { get }

    /// Reads the kind's own keys from its entry, whose keys are already checked.
    init(_ object: SpecObject) throws
    /// Refuses an entry that cannot tell an item's several outputs apart (a URL or an
    /// object key without `{output}`); `entry` is the sink's node. Nothing by default.
    func checkSeveralOutputs(entry: SpecNode) throws
    /// The sink of a run: `${…}` expanded, paths resolved and checked.
    func make(_ context: SinkContext) throws -> any Sink
    /// The folder the sink writes into, as written (nil: it writes no folder).
    var folder: EnvString? { get }
    /// Whether `other` delivers what this does to the same place (a change-aware re-run
    /// compares sinks so). Equality by default.
    func deliversLike(_ other: any SinkParameters) -> Bool
}

extension SinkParameters {
    public static var sendsRequests: Bool { true }
    public func checkSeveralOutputs(entry: SpecNode) throws {}
    public var folder: EnvString? { nil }
    public func deliversLike(_ other: any SinkParameters) -> Bool { isEqual(other) }

    /// Whether `other` is of this kind and equal to this.
    func isEqual(_ other: any SinkParameters) -> Bool { (other as? Self) == self }

    /// The entry's JSON Schema: the kind's keys between the ones every sink takes.
    package static var schema: JSONValue {
        let shared: [(key: String, value: JSONValue)] = [("outputs", PipelineSchema.ref("outputIDs"))]
        return PipelineSchema.object(
            [("type", PipelineSchema.constant(typeName)), ("name", PipelineSchema.nonEmpty)] + properties + shared
                + (sendsRequests ? [("pacing", PipelineSchema.pacing)] : []),
            required: ["type"] + required)
    }
}

/// What a sink kind's `make` is given: the sink's name, the pipeline, the environment its
/// `${…}` expand in, and the run's HTTP client for the sink's requests.
public struct SinkContext {
    public let name: String
    package let spec: PipelineSpec
    package let environment: Environment
    /// Made on first use (a folder sink needs none): paced with the run's other requests,
    /// or not at all for a sink with `"pacing": "off"`.
    package let client: () -> HTTPClient

    package init(
        name: String, spec: PipelineSpec, environment: Environment, client: @escaping () -> HTTPClient
    ) {
        self.name = name
        self.spec = spec
        self.environment = environment
        self.client = client
    }

    package var retry: RetryPolicy { spec.retry }
}
