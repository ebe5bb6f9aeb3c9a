/// A colour from a pipeline file: `#rgb`, `#rrggbb` or `#rrggbbaa` (alpha 255 = opaque).
public struct Colour: Sendable, Equatable, Codable, CustomStringConvertible {
    public var red: Double
    public var green: Double
    public var blue: Double
    public var alpha: Double

    public init(red: Double, green: Double, blue: Double, alpha: Double = 255) {
        self.red = red
        self.green = green
        self.blue = blue
        self.alpha = alpha
    }

    public static let black = Colour(red: 0, green: 0, blue: 0)
    public static let white = Colour(red: 255, green: 255, blue: 255)

    /// Parses `#rgb`, `#rrggbb`, `#rrggbbaa`; nil otherwise.
    public init?(hex text: String) {
        guard text.hasPrefix("#") else { return nil }
        var digits = Array(text.dropFirst())
        if digits.count == 3 { digits = digits.flatMap { [$0, $0] } }
        guard digits.count == 6 || digits.count == 8 else { return nil }
        var values: [Double] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let value = UInt8(String(digits[index...index + 1]), radix: 16) else { return nil }
            values.append(Double(value))
        }
        self.init(red: values[0], green: values[1], blue: values[2], alpha: values.count == 4 ? values[3] : 255)
    }

    public var isOpaque: Bool { alpha >= 255 }

    public var description: String {
        let parts = [red, green, blue] + (isOpaque ? [] : [alpha])
        return "#"
            + parts.map { value in
                let hex = String(Int(value), radix: 16)
                return hex.count == 1 ? "0" + hex : hex
            }.joined()
    }
}
