import Foundation
import Metrics
import PipelineKit
import Prometheus
import Synchronization

/// What a run counts for `--metrics`: swift-metrics counters, gauges and timers over a
/// Prometheus registry of its own (no process-wide bootstrap), read as the Prometheus text
/// exposition by `exposition()`.
///
/// The stages call it where their events already are (an item settled, a delivery
/// recorded, a stage's work timed); without `--metrics` there is none (`nil`), and each call
/// is a skipped optional. Every series carries `pipeline` and `run` labels, and `worker`
/// for a worker of a shared run. Gauges that describe a moment (queue depths, hosts held
/// back) are read when a scrape asks, from the samplers the session registers.
public final class RunMetrics: Sendable {
    /// A timed stage of an item, the `stage` label of `imgpipe_stage_seconds`.
    public enum Stage: String, Sendable {
        case fetch, pixels, deliver
    }

    /// A gauge's value at the moment of a scrape: a metric name, its own labels, a value.
    public struct Sample: Sendable {
        public let name: String
        public let labels: [(String, String)]
        public let value: Double

        public init(_ name: String, _ value: Double, labels: [(String, String)] = []) {
            self.name = name
            self.labels = labels
            self.value = value
        }
    }

    private let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private let identity: Mutex<(pipeline: String, run: Int64?, worker: String?)>
    private let samplers = Mutex<[@Sendable () -> [Sample]]>([])

    public init(pipeline: String) {
        var factory = PrometheusMetricsFactory(registry: registry)
        // Stages of an item take from milliseconds (a cache hit) to minutes (a slow upload).
        factory.defaultDurationHistogramBuckets = [
            .milliseconds(5), .milliseconds(25), .milliseconds(100), .milliseconds(250), .milliseconds(500),
            .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10), .seconds(30), .seconds(60), .seconds(300),
        ]
        self.factory = factory
        identity = Mutex((pipeline, nil, nil))
    }

    /// Names the run (and the worker of a shared run) that the series are labelled with.
    /// The first run id given stays: a worker names the shared run before its local session
    /// would name its own journal's.
    public func identify(run: Int64, worker: String? = nil) {
        identity.withLock {
            if $0.run == nil { $0.run = run }
            if let worker { $0.worker = worker }
        }
    }

    /// The labels every series carries, then `own`.
    private func labels(_ own: [(String, String)]) -> [(String, String)] {
        let (pipeline, run, worker) = identity.withLock { ($0.pipeline, $0.run, $0.worker) }
        var all = [("pipeline", pipeline), ("run", run.map(String.init) ?? "")]
        if let worker { all.append(("worker", worker)) }
        return all + own
    }

    private func count(_ name: String, _ own: [(String, String)] = [], by amount: Int = 1) {
        Counter(label: name, dimensions: labels(own), factory: factory).increment(by: amount)
    }

    // MARK: - events

    /// An item ended: done, failed or skipped, with the reason of a failure or a skip.
    func settled(_ outcome: ItemOutcome) {
        switch outcome {
        case .done: count("imgpipe_items_total", [("status", "done"), ("reason", "")])
        case .failed(let failure): count("imgpipe_items_total", [("status", "failed"), ("reason", failure.reason.rawValue)])
        case .skipped(let skip): count("imgpipe_items_total", [("status", "skipped"), ("reason", skip.reason.rawValue)])
        }
    }

    /// Deliveries about to be recorded, by sink and outcome.
    func recording(_ changes: [StoreChange]) {
        for change in changes {
            switch change {
            case .delivered(_, _, let sink, _, _, _):
                count("imgpipe_deliveries_total", [("sink", sink), ("outcome", "delivered")])
            case .deliveryFailed(_, _, let sink, _, _):
                count("imgpipe_deliveries_total", [("sink", sink), ("outcome", "failed")])
            default: break
            }
        }
    }

    /// A `run --incremental` that found nothing changed and made no run (`UpToDate`): the
    /// series name the run compared with, and count its items done and its deliveries
    /// delivered, as a re-run that carried every item over whole would.
    public func upToDate(_ report: StatusReport) {
        identify(run: report.run)
        count("imgpipe_items_total", [("status", "done"), ("reason", "")], by: report.done)
        for (sink, counts) in report.sinks {
            count("imgpipe_deliveries_total", [("sink", sink), ("outcome", "delivered")], by: counts.done)
        }
    }

    /// The deliveries of an item `run --incremental` carried over whole, one per sink name
    /// given (every delivery row of such an item is done: the earlier run's, copied).
    func carried(deliveriesTo sinks: [String]) {
        for sink in sinks { count("imgpipe_deliveries_total", [("sink", sink), ("outcome", "delivered")]) }
    }

    /// Bytes of an image downloaded (not read from the cache).
    func downloaded(bytes: Int) { count("imgpipe_downloaded_bytes_total", by: bytes) }

    /// Bytes of outputs written to the run's staged folder.
    func wrote(bytes: Int) { count("imgpipe_written_bytes_total", by: bytes) }

    /// One attempt of a stage that will be tried again (`fetch`, `stage`, `deliver`).
    func retrying(_ stage: String) { count("imgpipe_retries_total", [("stage", stage)]) }

    /// A pixel helper ended while it had an item; the next item starts another.
    func pixelHelperEnded() { count("imgpipe_pixel_helper_restarts_total") }

    /// How long one item spent in `stage`, from `start` (`DispatchTime.now().uptimeNanoseconds`).
    func timed(_ stage: Stage, since start: UInt64) {
        let now = DispatchTime.now().uptimeNanoseconds
        Metrics.Timer(label: "imgpipe_stage_seconds", dimensions: labels([("stage", stage.rawValue)]), factory: factory)
            .recordNanoseconds(Int64(now > start ? now - start : 0))
    }

    /// Whether the session is moving items (1) or has ended (0: the endpoint lingers).
    public func sessionActive(_ active: Bool) {
        Gauge(label: "imgpipe_session_active", dimensions: labels([]), factory: factory).record(active ? 1 : 0)
    }

    /// Adds gauges read at each scrape (queue depths, hosts held back).
    func sample(_ sampler: @escaping @Sendable () -> [Sample]) {
        samplers.withLock { $0.append(sampler) }
    }

    /// The metrics in the Prometheus text exposition format (version 0.0.4).
    public func exposition() -> String {
        for sampler in samplers.withLock({ $0 }) {
            for sample in sampler() {
                Gauge(label: sample.name, dimensions: labels(sample.labels), factory: factory).record(sample.value)
            }
        }
        return registry.emitToString()
    }
}

/// A reporter that counts the items' ends in `metrics` and passes everything on to `base`.
struct MetricsReporter: RunReporter {
    let base: any RunReporter
    let metrics: RunMetrics

    func progress(_ progress: RunProgress) { base.progress(progress) }
    func itemFailed(key: String, failure: ItemFailure) { base.itemFailed(key: key, failure: failure) }
    func notice(_ message: String) { base.notice(message) }
    func info(_ message: String) { base.info(message) }

    func itemSettled(key: String, outcome: ItemOutcome) {
        metrics.settled(outcome)
        base.itemSettled(key: key, outcome: outcome)
    }
}
