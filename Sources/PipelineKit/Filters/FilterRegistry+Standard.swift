private typealias P = ParameterDefinition

private func colourParameter(_ name: String, _ fallback: String, _ summary: String) -> ParameterDefinition {
    P(name, .colour, default: .string(fallback), summary)
}

private func number(_ name: String, _ range: ClosedRange<Double>, _ fallback: Double, _ summary: String) -> ParameterDefinition {
    P(name, .number(range), default: .number(fallback, isInteger: false), summary)
}

/// `fill`'s and `crop`'s point for gravity `focus`.
private let focusParameter = P(
    "focus", .point,
    "with gravity focus: the point to centre on, {\"x\": …, \"y\": …} as fractions 0–1 of the picture "
        + "(constants or templates such as \"{meta.fx}\"); an item without a usable point is cropped by attention")

private func integer(
    _ name: String, _ range: ClosedRange<Int>, _ fallback: Int?, _ summary: String,
    required: Bool = false
) -> ParameterDefinition {
    P(name, .integer(range), default: fallback.map { .number(Double($0), isInteger: true) }, required: required, summary)
}

extension FilterRegistry {
    static let defaultFont = "DejaVu Sans Bold"
    /// A size in pixels: up to 100000 (past every encoder's largest side; libvips' own
    /// checks of larger values print GLib warnings before failing).
    package static let pixels = 1...100_000
    /// A font size in pixels: Pango draws the whole text at once (not tile by tile, as libvips
    /// does the rest), so its size bounds the memory a caption takes.
    static let fontPixels = 1...1000

    /// Every op imgpipe knows: the one list behind validation, the runner, `imgpipe filters`
    /// and `imgpipe schema`.
    public static let standard = FilterRegistry(definitions: geometry + colourOps + effects + overlays)

    static let geometry: [FilterDefinition] = [
        FilterDefinition(
            name: "autorotate", summary: "Turn the image upright from its EXIF orientation tag, and drop the tag.",
            parameters: []
        ) { _ in .autorotate },
        FilterDefinition(
            name: "fit",
            summary: "Resize to fit inside width×height, keeping the aspect ratio; never enlarges unless enlarge is true.",
            parameters: [
                integer("width", pixels, nil, "box width in pixels (omit for no limit)"),
                integer("height", pixels, nil, "box height in pixels (omit for no limit)"),
                P("enlarge", .boolean, default: .bool(false), "also scale up images smaller than the box"),
            ]
        ) { a in
            guard a.has("width") || a.has("height") else { throw a.fail("fit needs width, height or both") }
            return .fit(width: a.int("width"), height: a.int("height"), enlarge: a.bool("enlarge") ?? false)
        },
        FilterDefinition(
            name: "fill", summary: "Scale to cover width×height, then crop to exactly that size around gravity.",
            parameters: [
                integer("width", pixels, nil, "output width in pixels", required: true),
                integer("height", pixels, nil, "output height in pixels", required: true),
                P(
                    "gravity", .choice(Gravity.names), default: .string("centre"),
                    "what to keep: centre, a compass point, attention, entropy or focus"),
                focusParameter,
            ]
        ) { a in
            let (gravity, focus) = try a.placement()
            return .fill(width: a.int("width")!, height: a.int("height")!, gravity: gravity, focus: focus)
        },
        FilterDefinition(
            name: "resize", summary: "Resize to width and/or height (aspect kept when only one is given), or by scale.",
            parameters: [
                integer("width", pixels, nil, "output width in pixels"),
                integer("height", pixels, nil, "output height in pixels"),
                P("scale", .number(0.001...100), "factor for both sides (instead of width/height)"),
            ]
        ) { a in
            if a.has("scale"), a.has("width") || a.has("height") {
                throw a.fail("scale", "give either scale or width/height, not both")
            }
            guard a.has("scale") || a.has("width") || a.has("height") else { throw a.fail("resize needs width, height or scale") }
            return .resize(width: a.int("width"), height: a.int("height"), scale: a.double("scale"))
        },
        FilterDefinition(
            name: "crop", summary: "Cut out x, y, width, height; or the largest window of an aspect ratio placed by gravity.",
            parameters: [
                integer("x", 0...pixels.upperBound, nil, "left edge of the rectangle"),
                integer("y", 0...pixels.upperBound, nil, "top edge of the rectangle"),
                integer("width", pixels, nil, "rectangle width"),
                integer("height", pixels, nil, "rectangle height"),
                P("aspect", .aspect, "aspect ratio such as \"16:9\" (instead of a rectangle)"),
                P("gravity", .choice(Gravity.names), default: .string("centre"), "where the aspect window sits"),
                focusParameter,
            ]
        ) { a in
            let rect = ["x", "y", "width", "height"].filter(a.has)
            if let aspect = a.string("aspect") {
                if let first = rect.first { throw a.fail(first, "give either aspect or x, y, width, height, not both") }
                let (w, h) = ParameterType.aspect(aspect)!
                let (gravity, focus) = try a.placement()
                return .cropAspect(aspectWidth: w, aspectHeight: h, gravity: gravity, focus: focus)
            }
            for name in ["x", "y", "width", "height"] where !a.has(name) {
                throw a.fail(name, "missing (crop needs x, y, width and height, or aspect)")
            }
            // A rectangle is where it is said to be: nothing places it.
            if a.has("focus") { throw a.fail("focus", "used only with aspect (and gravity \"focus\")") }
            if a.gravity("gravity") != .centre { throw a.fail("gravity", "used only with aspect") }
            return .cropRect(x: a.int("x")!, y: a.int("y")!, width: a.int("width")!, height: a.int("height")!)
        },
        FilterDefinition(
            name: "rotate",
            summary: "Rotate clockwise by any angle; right angles are exact, other angles fill the corners with background.",
            parameters: [
                P("angle", .number(-3600...3600), required: true, "degrees, clockwise"),
                colourParameter("background", "#000000", "colour of the uncovered corners (#rrggbbaa for transparency)"),
            ]
        ) { a in
            .rotate(degrees: a.double("angle")!, background: a.colour("background") ?? .black)
        },
        FilterDefinition(
            name: "flip", summary: "Mirror the image.",
            parameters: [
                P(
                    "direction", .choice(["horizontal", "vertical"]), required: true,
                    "horizontal (left↔right) or vertical (top↔bottom)")
            ]
        ) { a in
            .flip(horizontal: a.string("direction") == "horizontal")
        },
        FilterDefinition(
            name: "pad", summary: "Add space around the image.",
            parameters: [
                integer("top", 0...100_000, 0, "pixels above"),
                integer("right", 0...100_000, 0, "pixels to the right"),
                integer("bottom", 0...100_000, 0, "pixels below"),
                integer("left", 0...100_000, 0, "pixels to the left"),
                colourParameter("color", "#000000", "fill colour (#rrggbbaa for transparency)"),
            ]
        ) { a in
            .pad(
                top: a.int("top")!, right: a.int("right")!, bottom: a.int("bottom")!, left: a.int("left")!,
                colour: a.colour("color") ?? .black)
        },
        FilterDefinition(
            name: "trim", summary: "Cut away a uniform border (the colour of the top-left pixel).",
            parameters: [
                number("threshold", 0...255, 10, "how far a pixel may differ from the border colour and still be border")
            ]
        ) { a in
            .trim(threshold: a.double("threshold")!)
        },
        FilterDefinition(
            name: "round-corners", summary: "Make the corners transparent along a circular arc (JPEG output shows them white).",
            parameters: [integer("radius", pixels, nil, "corner radius in pixels", required: true)]
        ) { a in
            .roundCorners(radius: a.int("radius")!)
        },
        FilterDefinition(
            name: "border", summary: "Frame the image with a solid border.",
            parameters: [
                integer("width", pixels, nil, "border width in pixels", required: true),
                colourParameter("color", "#000000", "border colour"),
            ]
        ) { a in
            .border(width: a.int("width")!, colour: a.colour("color") ?? .black)
        },
    ]

    static let colourOps: [FilterDefinition] = [
        FilterDefinition(
            name: "adjust", summary: "Colour controls: brightness, contrast, saturation, exposure, gamma, hue.",
            parameters: [
                number("brightness", -1...1, 0, "added to every channel (1 = white)"),
                number("contrast", 0...4, 1, "stretch around mid-grey (1 = unchanged)"),
                number("saturation", 0...4, 1, "colourfulness (0 = grey, 1 = unchanged)"),
                number("exposure", -10...10, 0, "stops of light, applied in linear light"),
                number("gamma", 0.1...10, 1, "mid-tones: out = in^(1/gamma); above 1 brightens"),
                number("hue", -180...180, 0, "hue rotation in degrees"),
            ]
        ) { a in
            .adjust(
                Adjustments(
                    brightness: a.double("brightness")!, contrast: a.double("contrast")!,
                    saturation: a.double("saturation")!, exposure: a.double("exposure")!,
                    gamma: a.double("gamma")!, hue: a.double("hue")!))
        },
        FilterDefinition(name: "grayscale", summary: "Convert to 8-bit greyscale; alpha is kept.", parameters: []) { _ in
            .grayscale
        },
        FilterDefinition(
            name: "sepia", summary: "Warm brown old-photo tones.",
            parameters: [number("intensity", 0...1, 1, "0 = unchanged, 1 = full sepia")]
        ) { a in
            .sepia(intensity: a.double("intensity")!)
        },
        FilterDefinition(
            name: "invert", summary: "Negative: every channel becomes 255 − value; alpha is kept.",
            parameters: []
        ) { _ in .invert },
        FilterDefinition(
            name: "posterize", summary: "Reduce each channel to a few levels.",
            parameters: [integer("levels", 2...64, 6, "levels per channel")]
        ) { a in
            .posterize(levels: a.int("levels")!)
        },
        FilterDefinition(
            name: "vignette", summary: "Darken towards the corners; the centre is untouched.",
            parameters: [
                number("intensity", 0...1, 0.5, "darkness at the corners (1 = black)"),
                number("radius", 0...2, 1, "size of the untouched centre (0 = none, 2 = no vignette)"),
            ]
        ) { a in
            .vignette(intensity: a.double("intensity")!, radius: a.double("radius")!)
        },
        FilterDefinition(
            name: "tint", summary: "Colour the image's luminance with one colour (monochrome tint), mixed by intensity.",
            parameters: [
                P("color", .colour, required: true, "the tint colour"),
                number("intensity", 0...1, 1, "0 = unchanged, 1 = fully tinted"),
            ]
        ) { a in
            .tint(colour: a.colour("color")!, intensity: a.double("intensity")!)
        },
        FilterDefinition(
            name: "normalize", summary: "Stretch levels so the darkest 1 % becomes black and the brightest 1 % white.",
            parameters: []
        ) { _ in .normalize },
        FilterDefinition(
            name: "threshold", summary: "Black and white: luminance at or above level becomes white, the rest black.",
            parameters: [number("level", 0...255, 128, "the cut-off")]
        ) { a in
            .threshold(level: a.double("level")!)
        },
    ]

    static let effects: [FilterDefinition] = [
        FilterDefinition(
            name: "blur", summary: "Gaussian blur.",
            parameters: [P("sigma", .number(0.3...100), required: true, "blur radius (standard deviation, pixels)")]
        ) { a in
            .blur(sigma: a.double("sigma")!)
        },
        FilterDefinition(
            name: "sharpen", summary: "Unsharp mask: out = in + amount × (in − blur(in, sigma)).",
            parameters: [
                number("sigma", 0.3...20, 1, "radius of the detail to sharpen"),
                number("amount", 0...10, 1, "strength"),
            ]
        ) { a in
            .sharpen(sigma: a.double("sigma")!, amount: a.double("amount")!)
        },
        FilterDefinition(
            name: "pixelate", summary: "Mosaic of size×size blocks aligned to the top-left corner.",
            parameters: [integer("size", 2...512, nil, "block size in pixels", required: true)]
        ) { a in
            .pixelate(size: a.int("size")!)
        },
        FilterDefinition(
            name: "median", summary: "Median filter (removes speckle noise).",
            parameters: [integer("size", 3...15, nil, "window size in pixels (odd)", required: true)]
        ) { a in
            let size = a.int("size")!
            guard size % 2 == 1 else { throw a.fail("size", "expected an odd integer from 3 to 15, got \(size)") }
            return .median(size: size)
        },
    ]

    static let overlays: [FilterDefinition] = [
        FilterDefinition(
            name: "caption", summary: "Meme caption: outlined text wrapped and fitted in the top and/or bottom band.",
            parameters: [
                P("top", .string, "text of the top band"),
                P("bottom", .string, "text of the bottom band"),
                P("font", .string, default: .string(defaultFont), "font family and style (fontconfig name)"),
                colourParameter("color", "#ffffff", "text colour"),
                colourParameter("strokeColor", "#000000", "outline colour"),
                integer("strokeWidth", 0...1000, nil, "outline width in pixels (default: scaled to the image)"),
                integer("size", fontPixels, nil, "font size in pixels (default: the largest that fits)"),
            ]
        ) { a in
            let top = a.string("top").flatMap { $0.isEmpty ? nil : $0 }
            let bottom = a.string("bottom").flatMap { $0.isEmpty ? nil : $0 }
            guard top != nil || bottom != nil else { throw a.fail("caption needs top, bottom or both") }
            return .caption(
                Caption(
                    top: top, bottom: bottom, font: a.string("font")!, colour: a.colour("color")!,
                    strokeColour: a.colour("strokeColor")!, strokeWidth: a.int("strokeWidth"),
                    size: a.int("size")))
        },
        FilterDefinition(
            name: "text", summary: "A block of text placed by gravity.",
            parameters: [
                P("text", .string, required: true, "the text"),
                P("gravity", .choice(Gravity.placementNames), default: .string("south"), "where it sits"),
                integer("margin", 0...100_000, 16, "distance from the edges in pixels"),
                P("font", .string, default: .string("DejaVu Sans"), "font family and style"),
                integer("size", fontPixels, nil, "font size in pixels (default: 5 % of the image height)"),
                colourParameter("color", "#ffffff", "text colour"),
                number("opacity", 0...1, 1, "0 = invisible, 1 = opaque"),
            ]
        ) { a in
            guard let text = a.string("text"), !text.isEmpty else { throw a.fail("text", "expected a non-empty string") }
            return .text(
                TextOverlay(
                    text: text, gravity: a.gravity("gravity"), margin: a.int("margin")!, font: a.string("font")!,
                    size: a.int("size"), colour: a.colour("color")!, opacity: a.double("opacity")!))
        },
        FilterDefinition(
            name: "watermark", summary: "Overlay an image (a logo), scaled to the width, placed by gravity or tiled.",
            parameters: [
                P("image", .string, required: true, "path of the watermark image (relative to the pipeline file)"),
                P("gravity", .choice(Gravity.placementNames), default: .string("south-east"), "where it sits"),
                number("opacity", 0...1, 0.5, "0 = invisible, 1 = opaque"),
                number("scale", 0.01...1, 0.2, "watermark width as a fraction of the image width"),
                integer("margin", 0...100_000, 16, "distance from the edges in pixels"),
                P("tile", .boolean, default: .bool(false), "repeat it over the whole image"),
            ]
        ) { a in
            guard let image = a.string("image"), !image.isEmpty else { throw a.fail("image", "expected a non-empty path") }
            return .watermark(
                Watermark(
                    image: image, gravity: a.gravity("gravity"), opacity: a.double("opacity")!,
                    scale: a.double("scale")!, margin: a.int("margin")!, tile: a.bool("tile")!))
        },
    ]
}
