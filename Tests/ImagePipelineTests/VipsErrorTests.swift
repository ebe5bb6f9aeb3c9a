import Testing
import VipsKit

@testable import PipelineKit

/// libvips failures are classified once, by the whole domain each error line starts with.
@Suite("libvips error kinds")
struct VipsErrorTests {
    func kind(_ message: String) -> VipsError.Kind { VipsError(operation: "x", message: message).kind }

    @Test func loadersAreDecodeErrors() {
        #expect(kind("VipsJpeg: Premature end of JPEG file") == .decode)
        #expect(kind("jpegload_buffer: out of order read at line 120") == .decode)
        #expect(kind("pngload_buffer: libpng read error") == .decode)
        #expect(kind("tiff2vips: read error") == .decode)
        #expect(kind("VipsForeignLoadPngBuffer: not a PNG") == .decode)
        #expect(kind("linear: vector must have 1 or 3 elements; VipsJpeg: Corrupt JPEG data: bad Huffman code") == .decode)
    }

    @Test func saversAreEncodeErrors() {
        #expect(kind("vips2jpeg: unable to write") == .encode)
        #expect(kind("heifsave_buffer: encoder not found") == .encode)
        #expect(kind("VipsForeignSaveJpegBuffer: write failed") == .encode)
    }

    /// Words that merely contain "load", "read" or "png" are not loaders.
    @Test func substringsDoNotCount() {
        #expect(kind("linear: the overload of thread read buffers") == .other)
        #expect(kind("embed: bad png-like extend mode") == .other)
        #expect(kind("Loader: something") == .other)
        #expect(kind("composite2: images must have the same number of bands") == .other)
    }
}
