/// Where a crop or an overlay sits: a compass point, the centre, or (for crops) what
/// libvips finds most interesting (`attention`: skin, saturation, edges; `entropy`: detail)
/// or a point the feed gives (`focus`, with the step's `FocusPoint`).
public enum Gravity: String, Sendable, CaseIterable, Codable {
    case centre
    case north
    case northEast = "north-east"
    case east
    case southEast = "south-east"
    case south
    case southWest = "south-west"
    case west
    case northWest = "north-west"
    case attention
    case entropy
    case focus

    /// The names accepted for crops (`center` is also taken as `centre`).
    public static var names: [String] { allCases.map(\.rawValue) }
    /// The names accepted for placing overlays (no smart gravities).
    public static var placementNames: [String] { allCases.filter { !$0.isSmart }.map(\.rawValue) }

    /// Chosen per image (`attention`, `entropy`, `focus`): not a place for an overlay.
    public var isSmart: Bool { self == .attention || self == .entropy || self == .focus }

    package init?(name: String) {
        self.init(rawValue: name == "center" ? "centre" : name)
    }

    /// The top-left corner of a `width`×`height` box in a `fullWidth`×`fullHeight` image,
    /// `margin` away from the edges it is pushed against (gravities chosen per image act as
    /// centre).
    package func offset(width: Int, height: Int, fullWidth: Int, fullHeight: Int, margin: Int = 0) -> (x: Int, y: Int) {
        let x: Int
        let y: Int
        switch self {
        case .west, .northWest, .southWest: x = margin
        case .east, .northEast, .southEast: x = fullWidth - width - margin
        default: x = (fullWidth - width) / 2
        }
        switch self {
        case .north, .northWest, .northEast: y = margin
        case .south, .southWest, .southEast: y = fullHeight - height - margin
        default: y = (fullHeight - height) / 2
        }
        return (x, y)
    }
}

/// `adjust`'s parameters (Core Image-style colour controls). Identity values: brightness 0,
/// contrast 1, saturation 1, exposure 0, gamma 1, hue 0.
public struct Adjustments: Sendable, Equatable, Codable {
    /// −1…1, added to every channel (1 = +255).
    public var brightness = 0.0
    /// 0…4, stretch around mid-grey.
    public var contrast = 1.0
    /// 0…4, chroma multiplier (0 = grey).
    public var saturation = 1.0
    /// −10…10 stops, applied in linear light.
    public var exposure = 0.0
    /// 0.1…10: out = in^(1/gamma), so above 1 brightens mid-tones.
    public var gamma = 1.0
    /// −180…180 degrees of hue rotation.
    public var hue = 0.0

    public init(
        brightness: Double = 0, contrast: Double = 1, saturation: Double = 1, exposure: Double = 0,
        gamma: Double = 1, hue: Double = 0
    ) {
        self.brightness = brightness
        self.contrast = contrast
        self.saturation = saturation
        self.exposure = exposure
        self.gamma = gamma
        self.hue = hue
    }
}

/// `caption`'s parameters: meme-style outlined text in the top and bottom bands.
public struct Caption: Sendable, Equatable, Codable {
    public var top: String?
    public var bottom: String?
    public var font: String
    public var colour: Colour
    public var strokeColour: Colour
    /// Outline width in pixels; nil = scaled to the image.
    public var strokeWidth: Int?
    /// Font size in pixels; nil = the largest that fits the band.
    public var size: Int?

    public init(
        top: String?, bottom: String?, font: String, colour: Colour, strokeColour: Colour,
        strokeWidth: Int?, size: Int?
    ) {
        self.top = top
        self.bottom = bottom
        self.font = font
        self.colour = colour
        self.strokeColour = strokeColour
        self.strokeWidth = strokeWidth
        self.size = size
    }
}

/// `text`'s parameters: one block of text placed by gravity.
public struct TextOverlay: Sendable, Equatable, Codable {
    public var text: String
    public var gravity: Gravity
    public var margin: Int
    public var font: String
    /// Font size in pixels; nil = 5 % of the image height.
    public var size: Int?
    public var colour: Colour
    public var opacity: Double

    public init(text: String, gravity: Gravity, margin: Int, font: String, size: Int?, colour: Colour, opacity: Double) {
        self.text = text
        self.gravity = gravity
        self.margin = margin
        self.font = font
        self.size = size
        self.colour = colour
        self.opacity = opacity
    }
}

/// `watermark`'s parameters.
public struct Watermark: Sendable, Equatable, Codable {
    /// As written; relative paths are relative to the pipeline file.
    public var image: String
    public var gravity: Gravity
    public var opacity: Double
    /// Watermark width as a fraction of the image width.
    public var scale: Double
    public var margin: Int
    public var tile: Bool

    public init(image: String, gravity: Gravity, opacity: Double, scale: Double, margin: Int, tile: Bool) {
        self.image = image
        self.gravity = gravity
        self.opacity = opacity
        self.scale = scale
        self.margin = margin
        self.tile = tile
    }
}

/// One validated filter operation, ready to run.
public enum FilterStep: Sendable, Equatable, Codable {
    case autorotate
    /// Fit inside the box (a missing side is unbounded), aspect kept, never enlarged unless asked.
    case fit(width: Int?, height: Int?, enlarge: Bool)
    /// Cover the box, then crop to exactly its size around `gravity`.
    /// `focus` is set when `gravity` is `.focus`.
    case fill(width: Int, height: Int, gravity: Gravity, focus: FocusPoint?)
    /// To `width` and/or `height` (aspect kept when one is given), or by `scale`.
    case resize(width: Int?, height: Int?, scale: Double?)
    case cropRect(x: Int, y: Int, width: Int, height: Int)
    /// The largest `aspectWidth`:`aspectHeight` window, placed by `gravity` (and `focus`).
    case cropAspect(aspectWidth: Double, aspectHeight: Double, gravity: Gravity, focus: FocusPoint?)
    /// Clockwise degrees; right angles are exact, other angles fill corners with `background`.
    case rotate(degrees: Double, background: Colour)
    case flip(horizontal: Bool)
    case pad(top: Int, right: Int, bottom: Int, left: Int, colour: Colour)
    case trim(threshold: Double)
    case roundCorners(radius: Int)
    case border(width: Int, colour: Colour)
    case adjust(Adjustments)
    case grayscale
    case sepia(intensity: Double)
    case invert
    case posterize(levels: Int)
    case vignette(intensity: Double, radius: Double)
    case tint(colour: Colour, intensity: Double)
    case normalize
    case threshold(level: Double)
    case blur(sigma: Double)
    case sharpen(sigma: Double, amount: Double)
    case pixelate(size: Int)
    case median(size: Int)
    case caption(Caption)
    case text(TextOverlay)
    case watermark(Watermark)
}
