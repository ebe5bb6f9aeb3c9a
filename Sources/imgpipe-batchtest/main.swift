import Foundation
import ImagePipeline
import ImagePipelineTesting
import Logging
import PipelineKit

// A run of a pipeline file whose one sink is replaced by a `MemoryBatchSink`, so that
// the batching sink contract can be tested end to end in a process of its own (killed,
// resumed). Not a product: the tests run it (BatchingSinkTests).
//
//   imgpipe-batchtest run|resume PIPELINE STATE FOLDER BATCH-SIZE [PAUSE-BATCH HELD MARKER PROCEED]
//
// Prints the run's summary as JSON; exits 0 when every item is done, 1 when one failed or
// the run was left unfinished, 2 on bad arguments or a run that could not start.

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count == 5 || arguments.count == 9, ["run", "resume"].contains(arguments[0]),
    let batchSize = Int(arguments[4])
else {
    FileHandle.standardError.write(
        Data(
            "usage: imgpipe-batchtest run|resume PIPELINE STATE FOLDER BATCH-SIZE [PAUSE-BATCH HELD MARKER PROCEED]\n"
                .utf8))
    exit(2)
}
var pause: MemoryBatchSink.Pause?
if arguments.count == 9 {
    guard let batch = Int(arguments[5]), let held = Int(arguments[6]) else {
        FileHandle.standardError.write(Data("imgpipe-batchtest: PAUSE-BATCH and HELD must be numbers\n".utf8))
        exit(2)
    }
    pause = (batch: batch, heldItems: held, marker: arguments[7], proceed: arguments[8])
}

do {
    let path = URL(fileURLWithPath: arguments[1]).standardizedFileURL.path
    let spec = try PipelineSpec.load(path: path)
    let built = try BuiltPipeline.build(spec, path: path, environment: Environment())
    guard let sinkName = spec.sinks.first?.name else {
        FileHandle.standardError.write(Data("imgpipe-batchtest: \(path) has no sink\n".utf8))
        exit(2)
    }
    let sink = MemoryBatchSink(name: sinkName, folder: arguments[3], batchSize: batchSize, pause: pause)
    let runner = PipelineRunner(
        pipeline: built.replacingSinks([sink]), store: try RunStore(path: arguments[2]), reporter: SilentReporter(),
        logger: Logger(label: "imgpipe-batchtest"))
    let mode: RunMode =
        arguments[0] == "run" ? .fresh(limit: nil, replaceUnfinished: false) : .resume(retryFailed: false)
    let summary = try runner.execute(mode)
    print(String(decoding: try JSONEncoder().encode(summary), as: UTF8.self))
    exit(summary.failed == 0 && summary.pending == 0 ? 0 : 1)
} catch {
    FileHandle.standardError.write(Data("imgpipe-batchtest: \(error)\n".utf8))
    exit(2)
}
