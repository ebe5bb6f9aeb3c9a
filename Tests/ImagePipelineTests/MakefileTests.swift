import Foundation
import Testing

@testable import PipelineKit

/// What each `make` target would install, as `make -n` prints it: the first command a new
/// user runs installs what the demo needs and nothing more; servers and tools that only the
/// tests use come with `make test`.
@Suite("Makefile")
struct MakefileTests {
    func dryRun(_ target: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["make", "-n", "-C", DeployTests.root, target]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "make -n \(target) failed")
        return output
    }

    @Test func theDemoInstallsNoTestServer() throws {
        let demo = try dryRun("demo")
        #expect(demo.contains("libvips-dev") && demo.contains("fonts-dejavu-core"))
        for testOnly in ["postgresql", "chromium", "slurm-wlm", "munge", "moto"] {
            #expect(!demo.contains(testOnly), "make demo would install \(testOnly)")
        }
        let test = try dryRun("test")
        for needed in ["libvips-dev", "postgresql", "chromium", "slurm-wlm", "munge", "moto"] {
            #expect(test.contains(needed), "make test would not install \(needed)")
        }
    }
}
