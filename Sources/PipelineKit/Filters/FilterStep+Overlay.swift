import Foundation
import VipsKit

extension VipsImage {
    /// Meme captions: each text is wrapped and fitted (or set at `size`) inside a band of
    /// 22 % of the height at the top or bottom, centred, filled with `colour` and outlined
    /// with `strokeColour`. Only those bands change.
    func captioned(_ caption: Caption) throws -> VipsImage {
        let image = try toSRGB()
        let (w, h) = (image.width, image.height)
        let stroke = caption.strokeWidth ?? max(1, Int((Double(min(w, h)) / 150).rounded()))
        let margin = max(2, w / 40)
        let boxWidth = max(1, w - 2 * margin - 2 * stroke)
        let boxHeight = max(1, Int(Double(h) * 0.22) - 2 * stroke)
        var result = image
        for (text, atTop) in [(caption.top, true), (caption.bottom, false)] {
            guard let text else { continue }
            let mask: VipsImage
            if let size = caption.size {
                mask = try VipsImage.text(Self.markup(text), font: "\(caption.font) \(size)", width: boxWidth)
            } else {
                mask = try VipsImage.text(Self.markup(text), font: caption.font, width: boxWidth, height: boxHeight)
            }
            let x = (w - mask.width) / 2
            let y = atTop ? margin + stroke : h - margin - stroke - mask.height
            result = try result.painting(
                mask, x: x, y: y, colour: caption.colour, outline: caption.strokeColour,
                outlineWidth: stroke, opacity: 1)
        }
        return result
    }

    /// One block of text, placed by gravity, `margin` from the edges.
    func withText(_ overlay: TextOverlay) throws -> VipsImage {
        let image = try toSRGB()
        let size = overlay.size ?? max(8, image.height / 20)
        let mask = try VipsImage.text(
            Self.markup(overlay.text), font: "\(overlay.font) \(size)",
            width: max(1, image.width - 2 * overlay.margin))
        let origin = overlay.gravity.offset(
            width: mask.width, height: mask.height, fullWidth: image.width,
            fullHeight: image.height, margin: overlay.margin)
        // A margin as large as the picture puts the text wholly outside it (which libvips
        // would only call `embed: bad dimensions`); `validate` tells it when a chain's
        // sizes are known (`SizeBound`).
        if origin.y + mask.height <= 0 || origin.y >= image.height || origin.x + mask.width <= 0 || origin.x >= image.width {
            let side = origin.x + mask.width <= 0 || origin.x >= image.width ? "width" : "height"
            let length = side == "width" ? image.width : image.height
            throw FilterError(
                "the \(mask.width)×\(mask.height) text, \(overlay.margin) px from the \(overlay.gravity.rawValue) "
                    + "edge, lies wholly outside the picture (margin \(overlay.margin) is not less than its \(side), "
                    + "\(length))")
        }
        return try image.painting(
            mask, x: origin.x, y: origin.y, colour: overlay.colour, outline: nil,
            outlineWidth: 0, opacity: overlay.opacity)
    }

    /// Paints `colour` through a text mask placed at (x, y), optionally outlined first.
    func painting(
        _ mask: VipsImage, x: Int, y: Int, colour: Colour, outline: Colour?, outlineWidth: Int,
        opacity: Double
    ) throws -> VipsImage {
        let (w, h) = (width, height)
        // libvips places no mask wholly outside its canvas (`embed: bad dimensions`).
        guard x + mask.width > 0, y + mask.height > 0, x < w, y < h else {
            throw FilterError("the \(mask.width)×\(mask.height) text at (\(x), \(y)) lies wholly outside the picture")
        }
        func solid(_ c: Colour) throws -> VipsImage {
            try VipsImage.black(width: w, height: h, bands: 3).linear([1, 1, 1], [c.red, c.green, c.blue], clipToByte: true)
        }
        func place(_ m: VipsImage, _ mx: Int, _ my: Int) throws -> VipsImage {
            let weighted = opacity < 1 ? try m.linear([opacity], [0], clipToByte: true) : m
            return try weighted.embedded(x: mx, y: my, width: w, height: h, background: [0])
        }
        // The outline first, then the letters, each through its own mask.
        var layers: [(colour: Colour, mask: VipsImage)] = []
        if let outline, outlineWidth > 0 {
            let window = 2 * outlineWidth + 1
            let grown = try mask.embedded(
                x: outlineWidth, y: outlineWidth, width: mask.width + 2 * outlineWidth,
                height: mask.height + 2 * outlineWidth, background: [0]
            )
            .ranked(size: window, index: window * window - 1)
            layers.append((outline, try place(grown, x - outlineWidth, y - outlineWidth)))
        }
        layers.append((colour, try place(mask, x, y)))
        let painted = try mappingColour { base in
            try layers.reduce(base) { try $0.blended(with: solid($1.colour), mask: $1.mask) }
        }
        guard hasAlpha else { return painted }
        // Text is drawn whatever the alpha under it: where a layer covers, the alpha rises
        // as the colour does (over a transparent area the letters become opaque).
        let opaque = try VipsImage.black(width: w, height: h, bands: 1).linear([1], [255], clipToByte: true)
        let alpha = try layers.reduce(try painted.extractBands(painted.bands - 1)) {
            try $0.blended(with: opaque, mask: $1.mask)
        }
        let joined = try painted.extractBands(0, count: painted.bands - 1).joined(with: alpha.castToUChar())
        return painted.colourSpace == .other ? joined : try joined.labelled(painted.colourSpace)
    }

    /// An image composited over this one: scaled to `scale` of the width, its alpha
    /// multiplied by `opacity`, placed by gravity or tiled.
    func watermarked(_ watermark: Watermark, path: String) throws -> VipsImage {
        let image = try toSRGB()
        let targetWidth = max(1, Int((Double(image.width) * watermark.scale).rounded()))
        var mark = try VipsImage.thumbnail(path: path, width: targetWidth, height: 10_000_000, size: .both, autorotate: true)
            .toSRGB()
        if !mark.hasAlpha { mark = try mark.appendingBand(255) }
        let alpha = try mark.extractBands(3).linear([watermark.opacity], [0], clipToByte: true)
        mark = try mark.extractBands(0, count: 3).joined(with: alpha).labelled(.srgb)
        var x = 0
        var y = 0
        if watermark.tile {
            let across = (image.width + mark.width - 1) / mark.width
            let down = (image.height + mark.height - 1) / mark.height
            mark = try mark.replicated(across: across, down: down)
                .cropped(left: 0, top: 0, width: image.width, height: image.height)
        } else {
            (x, y) = watermark.gravity.offset(
                width: mark.width, height: mark.height, fullWidth: image.width,
                fullHeight: image.height, margin: watermark.margin)
        }
        let composited = try image.compositing(mark, x: x, y: y).castToUChar()
        let result = image.hasAlpha ? composited : try composited.extractBands(0, count: 3)
        return try result.labelled(.srgb)
    }

    /// Text for libvips' Pango renderer, with markup characters escaped.
    static func markup(_ text: String) -> String { text.xmlEscaped }
}
