import Foundation
import VipsKit

extension ImageFixtures {
    /// A synthetic scene that differs from every other seed's in layout, not only in colour:
    /// a background graded between two colours along a direction of its own, and four to
    /// nine rectangles and ellipses of their own sizes, places and colours, with a little
    /// noise. For tests that must tell distinct pictures apart (near-duplicate detection).
    public static func scene(width: Int, height: Int, seed: UInt64) throws -> VipsImage {
        var random = SeededRandom(seed: seed)
        func colour() -> (Double, Double, Double) {
            (Double(random.next() % 256), Double(random.next() % 256), Double(random.next() % 256))
        }
        let from = colour()
        let to = colour()
        let angle = Double(random.next() % 360) * .pi / 180
        let (dx, dy) = (cos(angle), sin(angle))
        struct Shape {
            let ellipse: Bool
            let x: Double, y: Double, rx: Double, ry: Double
            let colour: (Double, Double, Double)
        }
        let shapes = (0..<(4 + Int(random.next() % 6))).map { _ in
            Shape(
                ellipse: random.next() % 2 == 0,
                x: Double(random.next() % UInt64(width)), y: Double(random.next() % UInt64(height)),
                rx: Double(width) * (0.05 + Double(random.next() % 100) / 400),
                ry: Double(height) * (0.05 + Double(random.next() % 100) / 400), colour: colour())
        }
        var bytes = [UInt8](repeating: 0, count: width * height * 3)
        let span = abs(dx) * Double(width) + abs(dy) * Double(height)
        for y in 0..<height {
            for x in 0..<width {
                var t =
                    ((Double(x) - (dx < 0 ? Double(width) : 0)) * dx + (Double(y) - (dy < 0 ? Double(height) : 0)) * dy) / span
                t = min(1, max(0, t))
                var pixel = (
                    from.0 + (to.0 - from.0) * t, from.1 + (to.1 - from.1) * t, from.2 + (to.2 - from.2) * t
                )
                for shape in shapes {
                    let u = (Double(x) - shape.x) / shape.rx
                    let v = (Double(y) - shape.y) / shape.ry
                    if shape.ellipse ? u * u + v * v <= 1 : abs(u) <= 1 && abs(v) <= 1 { pixel = shape.colour }
                }
                let noise = Double(Int(random.next() % 9) - 4)
                let i = (y * width + x) * 3
                bytes[i] = UInt8(clamping: Int(pixel.0 + noise))
                bytes[i + 1] = UInt8(clamping: Int(pixel.1 + noise))
                bytes[i + 2] = UInt8(clamping: Int(pixel.2 + noise))
            }
        }
        return try VipsImage.fromPixels(bytes, width: width, height: height, bands: 3).labelled(.srgb)
    }
}
