import Foundation
import ImagePipeline
import ParquetKit
import PipelineKit
import VipsKit

/// The decode-and-check path as a fuzz target: any bytes through `ImageProcessor` with a
/// fit and JPEG output under the default limits (a GIF or a WebP, to an animated WebP as
/// well: every frame); bytes that begin with `PAR1` through `ParquetReader` instead, every
/// row of every column. A failure (`ItemFailure`,
/// `ParquetError`) is an answer; a crash, a hang or memory over libFuzzer's `-rss_limit_mb`
/// is a finding.
///
/// `make fuzz` builds it with `-sanitize=fuzzer -DFUZZING` (libFuzzer supplies `main`);
/// an ordinary build makes a replayer: `imgpipe-fuzz FILE…` runs each file once, to
/// reproduce a finding under a debugger.
enum FuzzTarget {
    static let processor: ImageProcessor = {
        var output = OutputSpec()
        output.format = .jpeg
        return ImageProcessor(filters: [.fit(width: 256, height: 256, enlarge: false)], output: output, limits: Limits())
    }()

    /// Every frame of an animation through a fit and a crop.
    static let animated: ImageProcessor = {
        var output = OutputSpec()
        output.format = .webp
        let steps: [FilterStep] = [
            .fit(width: 256, height: 256, enlarge: false),
            .cropAspect(aspectWidth: 1, aspectHeight: 1, gravity: .north, focus: nil),
        ]
        return ImageProcessor(filters: steps, output: output, limits: Limits())
    }()

    /// Processes one input; returns the failure's reason, or `done`.
    @discardableResult
    static func run(_ data: Data) -> String {
        if data.starts(with: Array("PAR1".utf8)) { return table(data) }
        defer { VipsRuntime.endThreadWork() }
        do {
            _ = try processor.process(.data(data))
            if data.starts(with: Array("GIF8".utf8)) || data.starts(with: Array("RIFF".utf8)) {
                _ = try animated.process(.data(data))
            }
            return "done"
        } catch {
            return error.description
        }
    }

    /// Reads a Parquet file whole; returns the error, or how many rows it read.
    static func table(_ data: Data) -> String {
        do {
            let reader = try ParquetReader(bytes: [UInt8](data))
            let flat = reader.columns.indices.filter { !reader.columns[$0].isNested }
            var rows = 0
            for group in 0..<reader.rowGroupCount {
                var cursor = try reader.rows(inGroup: group, columns: flat)
                while try cursor.next() != nil { rows += 1 }
            }
            return "\(rows) rows"
        } catch {
            return "\(error)"
        }
    }
}

#if FUZZING
    @_cdecl("LLVMFuzzerTestOneInput")
    public func fuzzTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
        guard let start else { return 0 }
        FuzzTarget.run(Data(bytes: start, count: count))
        return 0
    }

    /// libFuzzer's driver, for an executable whose entry point is not libFuzzer's `main`.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    // (the C symbol libFuzzer defines)
    @_silgen_name("LLVMFuzzerRunDriver")
    func LLVMFuzzerRunDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    ) -> CInt

    /// SwiftPM links an executable with its entry point renamed to `<module>_main`: that is
    /// where libFuzzer is started.
    @_cdecl("imgpipe_fuzz_main")
    public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
        var count = argc
        var arguments = argv
        return LLVMFuzzerRunDriver(&count, &arguments) { start, size in fuzzTestOneInput(start, size) }
    }
#else
    @main
    struct Replay {
        static func main() throws {
            for path in CommandLine.arguments.dropFirst() {
                print("\(path): \(FuzzTarget.run(try Data(contentsOf: URL(fileURLWithPath: path))))")
            }
        }
    }
#endif
