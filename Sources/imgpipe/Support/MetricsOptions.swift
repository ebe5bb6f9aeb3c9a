import ArgumentParser
import Foundation
import ImagePipeline
import PipelineKit

/// `--metrics` and `--metrics-linger`, for the commands that work on items (`run`,
/// `resume`, `work`).
struct MetricsOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Serve Prometheus metrics at http://HOST:PORT/metrics while the command runs "
                + "(HOST an IP address; a bare PORT or :PORT is 127.0.0.1:PORT).",
            valueName: "[HOST:]PORT"))
    var metrics: String?

    @Option(
        help: ArgumentHelp(
            "Seconds the metrics endpoint keeps answering after the run has ended, for a last scrape.",
            valueName: "SECONDS"))
    var metricsLinger: Double = 0

    func validate() throws {
        if let metrics {
            do { _ = try MetricsAddress(parsing: metrics) } catch { throw ValidationError(error.description) }
        }
        guard (0...3600).contains(metricsLinger) else {
            throw ValidationError("--metrics-linger must be from 0 to 3600 seconds, got \(metricsLinger)")
        }
        if metricsLinger > 0, metrics == nil { throw ValidationError("--metrics-linger needs --metrics") }
    }

    /// Binds the endpoint before any work (nil without `--metrics`); an address that cannot
    /// be listened on is a usage error naming it.
    func start(pipeline: String) throws -> MetricsServing? {
        guard let metrics else { return nil }
        let counted = RunMetrics(pipeline: pipeline)
        do {
            let endpoint = try MetricsEndpoint(address: MetricsAddress(parsing: metrics), metrics: counted)
            return MetricsServing(metrics: counted, endpoint: endpoint, linger: metricsLinger)
        } catch {
            throw CommandError.usage(error.description)
        }
    }
}

/// The metrics of a command under way and the endpoint serving them.
struct MetricsServing {
    let metrics: RunMetrics
    let endpoint: MetricsEndpoint
    let linger: Double

    /// At the command's end: once a run has ended (`ran`), marks the session ended and keeps
    /// answering for `linger` seconds; then stops.
    func finish(ran: Bool) {
        if ran {
            metrics.sessionActive(false)
            if linger > 0 { Thread.sleep(forTimeInterval: linger) }
        }
        endpoint.stop()
    }
}
