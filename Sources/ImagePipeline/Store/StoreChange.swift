import PipelineKit

/// One state change of an item, written by `RunStore.apply(_:)`.
public enum StoreChange: Sendable {
    /// A newly listed item: pending, with a pending delivery per (output, sink). Output
    /// names known before processing are claimed now: a second item with the same name fails.
    case insert(NewItem)
    /// The input is readable at `spoolPath`; `tier` says what served it (nil: unchanged).
    case fetched(key: String, spoolPath: String, tier: Tier?)
    /// Every output is staged. Names not claimed at insert are claimed now. `source` is what
    /// the input was (for change-aware runs); `fingerprint` what the first output looks
    /// like; `kept`: a run with `dedup` kept the item as the first of its kind, and later
    /// items are compared with it.
    case processed(
        key: String, outputs: [StagedOutput], source: SourceStamp? = nil, fingerprint: ImageFingerprint? = nil,
        kept: Bool = false)
    /// One sink has one output; the item is done when every delivery is.
    case delivered(
        key: String, output: String = OutputSpec.defaultID, sink: String, remoteURL: String?, httpStatus: Int?,
        attempts: Int = 1)
    /// One sink refused one output for good: the item fails with reason `upload`.
    case deliveryFailed(key: String, output: String = OutputSpec.defaultID, sink: String, failure: ItemFailure, attempts: Int)
    /// The item failed before delivery.
    case failed(key: String, failure: ItemFailure, attempts: Int)
    /// The item is not to be processed (opted out, refused by robots.txt, outside
    /// `accept`): terminal, and its deliveries are never attempted.
    case skipped(key: String, skip: ItemSkip)
    /// `dedup.placeholders`: `host` gave `sha256`'s bytes for the item `key`; `flagging`
    /// are the items made with them before they were found to be a placeholder.
    case sighted(host: String, sha256: String, key: String, flagging: [String])
    /// Back to an earlier stage (its staged output or spool was lost).
    case reset(key: String, to: ItemStatus)
    /// The feed has been listed to its end (or to the run's `--limit`).
    case feedComplete
}

extension StoreChange {
    /// The insert of an item `run --incremental` carries over whole (`NewItem.isCarriedWhole`).
    var isCarriedInsert: Bool {
        if case .insert(let item) = self { item.isCarriedWhole } else { false }
    }
}

extension NewItem {
    /// Whether `carried` keeps every output, for every sink that takes it: the item needs
    /// no stage (unless its rows can be neither taken over nor copied, which is rare).
    public var isCarriedWhole: Bool {
        carried?.keepsWhole(outputs: outputs.map(\.id), takers: outputs.map(\.sinks)) ?? false
    }
}

extension NewItem.Carried {
    /// Whether it keeps each of `outputs` for every sink that takes it (`takers`, one list
    /// per output).
    public func keepsWhole(outputs ids: [String], takers: [[String]]) -> Bool {
        Set(outputs) == Set(ids) && takers.allSatisfy { $0.allSatisfy(sinks.contains) }
    }
}

/// One output of a newly listed item: its name when known before processing, and the
/// sinks that take it.
public struct NewOutput: Sendable, Equatable {
    public let id: String
    public let name: String?
    public let sinks: [String]
    /// The name made from the item's `NewItem.uniqueStem`, taken instead of `name` when
    /// another item holds that.
    public var uniqueName: String?

    public init(id: String = OutputSpec.defaultID, name: String?, sinks: [String]) {
        self.id = id
        self.name = name
        self.sinks = sinks
    }
}

/// An item as listed by a feed.
public struct NewItem: Sendable, Equatable {
    public let key: String
    public let seq: Int
    public let location: String
    public let metadata: String?
    public let outputs: [NewOutput]
    /// What `{key}` and `{stem}` become in output names.
    public let nameKey: String
    public let nameStem: String
    /// Known at listing for items of a fallback source.
    public let tier: Tier?
    /// The stem the item's names are made from when one made from `nameStem` is held by
    /// another item (`NameTemplate.uniqueStem`): the store then gives it the outputs'
    /// `NewOutput.uniqueName` names and records this stem (`ChangeOutcome.renamed`).
    public var uniqueStem: String?
    /// `run --incremental`: outputs whose name, what was made and done deliveries are
    /// copied from the previous run instead of being made again (the item's source is the
    /// one that run processed).
    public var carried: Carried?

    public struct Carried: Sendable, Equatable {
        /// The run compared with.
        public let run: Int64
        /// The run that holds the item's rows: `run`, or a later one that took them over
        /// (`HandOn`) and was abandoned or listed part of the feed.
        public var holder: Int64
        public let outputs: [String]
        /// The sinks whose deliveries are copied (those the pipeline file did not change);
        /// the others' stay pending, and the item is made and delivered to them.
        public let sinks: [String]
        /// The item's `versionField` value in the feed now, recorded with the source it
        /// carries: the previous run may have none (the field was named since), and without
        /// it every later run would compare the image's bytes again, a request an item.
        public var version: String?

        public init(run: Int64, outputs: [String], sinks: [String], version: String? = nil, holder: Int64? = nil) {
            self.run = run
            self.holder = holder ?? run
            self.outputs = outputs
            self.sinks = sinks
            self.version = version
        }
    }

    /// An item of a pipeline with one output.
    public init(
        key: String, seq: Int, location: String, metadata: String?, outputName: String?, sinks: [String],
        nameKey: String? = nil, nameStem: String? = nil, tier: Tier? = nil
    ) {
        self.init(
            key: key, seq: seq, location: location, metadata: metadata,
            outputs: [NewOutput(name: outputName, sinks: sinks)], nameKey: nameKey, nameStem: nameStem, tier: tier)
    }

    public init(
        key: String, seq: Int, location: String, metadata: String?, outputs: [NewOutput],
        nameKey: String? = nil, nameStem: String? = nil, tier: Tier? = nil
    ) {
        self.key = key
        self.seq = seq
        self.location = location
        self.metadata = metadata
        self.outputs = outputs
        self.nameKey = nameKey ?? key
        self.nameStem = nameStem ?? NameTemplate.stem(of: key)
        self.tier = tier
    }
}

/// A processed item's output, waiting for its sinks.
public struct StagedOutput: Sendable, Equatable {
    /// The output's id (`OutputSpec.id`).
    public let id: String
    public let path: String
    public let name: String
    public let sha256: String
    public let bytes: Int
    public let width: Int
    public let height: Int
    /// The quality a search chose (`OutputSpec.searchesQuality`); nil for a fixed one.
    public let choice: QualityChoice?
    /// The format `"best"` chose; nil: the output's own.
    public let format: OutputFormat?

    public init(
        id: String = OutputSpec.defaultID, path: String, name: String, sha256: String, bytes: Int, width: Int,
        height: Int, choice: QualityChoice? = nil, format: OutputFormat? = nil
    ) {
        self.choice = choice
        self.format = format
        self.id = id
        self.path = path
        self.name = name
        self.sha256 = sha256
        self.bytes = bytes
        self.width = width
        self.height = height
    }
}

/// What became of one change.
public enum ChangeOutcome: Sendable, Equatable {
    case applied
    /// `insert` of a key the run already has (listed before, or twice in the feed).
    case existing(seq: Int, status: ItemStatus)
    /// The change turned the item into a failure (e.g. its output name was taken).
    case failed(ItemFailure)
    /// `delivered` completed the item.
    case completed
    /// `skipped` gave the item's output names up, and these items, which had failed because
    /// one of those names was taken, were put back to `pending` (in feed order, the first
    /// for each name): the runner takes them up again.
    case revived([String])
    /// `insert` found a name of the item held by another and gave the item the names made
    /// from its unique stem, this one, instead.
    case renamed(stem: String)
}
