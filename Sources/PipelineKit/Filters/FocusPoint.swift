import Foundation
import VipsKit

/// The point a `fill` or `crop` window is centred on when its gravity is `focus`: `x` and
/// `y` as fractions from 0 to 1 of the picture the filter is given (0, 0 is the top left
/// corner), each a constant (`"0.25"`) or a template filled from the item
/// (`"{meta.fx}"`, as texts are), read for each image.
public struct FocusPoint: Sendable, Equatable, Codable {
    public var x: String
    public var y: String

    public init(x: String, y: String) {
        self.x = x
        self.y = y
    }

    /// The point for one item, or why it has none (a value missing, or not a fraction).
    package enum Resolution: Equatable {
        case point(x: Double, y: Double)
        case unusable(String)
    }

    package func resolved(with fields: ItemFields?) -> Resolution {
        var values: [Double] = []
        for (axis, text) in [("x", x), ("y", y)] {
            let filled = fields?.fill(text) ?? text
            guard let value = Self.fraction(filled) else {
                let source = filled == text ? "" : " (\(text))"
                // A feed's value is quoted, up to 80 scalars of it (a character may hold
                // any number of combining marks).
                let shown =
                    filled.unicodeScalars.count > 80 ? String(filled.unicodeScalars.prefix(80)) + "…" : filled
                let what =
                    filled.allSatisfy(\.isWhitespace)
                    ? "is missing" : "is \(JSONValue.quote(shown)), not a fraction from 0 to 1"
                return .unusable("focus \(axis)\(source) \(what)")
            }
            values.append(value)
        }
        return .point(x: values[0], y: values[1])
    }

    /// `text` (spaces and line breaks around it aside) as a number from 0 to 1 written as
    /// JSON writes numbers (`0.25`, `1`, `2.5e-1`; not `0x1p-2`, `.5` or `nan`), or nil.
    package static func fraction(_ text: String) -> Double? {
        guard case .number(let value, _)? = try? JSONParser.parse(text), (0...1).contains(value) else { return nil }
        return value
    }

    /// Whether `text` is a template that may fill to a number: at least one `{…}`, each a
    /// complete field of the item (`{meta.fx}`, `{key}`…), and around them only what a
    /// number is written with (digits, `.`, `e`, `+`, `-`, spaces): what `validate` takes
    /// besides a number. `"{meta.fx"` and `"{key}x"` are not.
    package static func isTemplate(_ text: String) -> Bool {
        var fields = 0
        var rest = Substring(text)
        while let open = rest.firstIndex(where: { $0 == "{" || $0 == "}" }) {
            guard rest[open] == "{", let close = rest[open...].firstIndex(of: "}"),
                rest[..<open].allSatisfy(isNumberCharacter)
            else { return false }
            guard ItemFields.isField(rest[rest.index(after: open)..<close]) else { return false }
            fields += 1
            rest = rest[rest.index(after: close)...]
        }
        return fields > 0 && rest.allSatisfy(isNumberCharacter)
    }

    private static func isNumberCharacter(_ character: Character) -> Bool {
        character.isWhitespace || "0123456789.eE+-".contains(character)
    }

    /// The top-left corner of a `width`×`height` window centred on (`x`, `y`) of a
    /// `fullWidth`×`fullHeight` picture, moved as little as it takes to lie inside it.
    package static func window(
        width: Int, height: Int, fullWidth: Int, fullHeight: Int, x: Double, y: Double
    ) -> (x: Int, y: Int) {
        func start(_ length: Int, _ full: Int, _ fraction: Double) -> Int {
            let centred = Int((fraction * Double(full) - Double(length) / 2).rounded())
            return min(max(0, centred), max(0, full - length))
        }
        return (start(width, fullWidth, x), start(height, fullHeight, y))
    }
}

/// What the processor had to say of one item (a focus point it could not use), each note
/// once, in the order they came: at most `most`, then one saying more were left out.
final class ItemNotes: Sendable {
    static let most = 16
    private let notes = LockedBox<[String]>([])

    func add(_ note: String) {
        notes.withLock { notes in
            guard !notes.contains(note), notes.count <= Self.most else { return }
            notes.append(notes.count < Self.most ? note : "more notes left out")
        }
    }

    var all: [String] { notes.withLock { $0 } }
}

extension VipsImage {
    /// Crops to `size` around `gravity`; with `.focus`, centred on the item's `focus` point
    /// as far as the picture allows, or (when the item gives no usable point) by
    /// `attention`, with a note saying why. An image already that size is returned as is.
    func cropped(
        to size: (width: Int, height: Int), gravity: Gravity, focus: FocusPoint?, context: FilterContext
    ) throws -> VipsImage {
        guard gravity == .focus, let focus else { return try cropped(to: size, gravity: gravity) }
        let w = min(size.width, width)
        let h = min(size.height, height)
        guard w != width || h != height else { return self }
        switch focus.resolved(with: context.fields) {
        case .point(let x, let y):
            let origin = FocusPoint.window(width: w, height: h, fullWidth: width, fullHeight: height, x: x, y: y)
            return try cropped(left: origin.x, top: origin.y, width: w, height: h)
        case .unusable(let why):
            context.notes?.add(why + "; cropped by attention instead")
            return try cropped(to: size, gravity: .attention)
        }
    }
}
