import Foundation
import PipelineKit

/// The dry-run's `index.html`: one self-contained file that opens from disk (inline CSS and
/// JS, no external resources; pictures referenced relative to it).
///
/// - A summary at the top: the number of samples, the failed ones listed first (their cards
///   are sorted first too), bytes before → after in total and per image with the share
///   saved, mean SSIM, and the median and mean time per image; one line per pipeline.
/// - One card per sample: the before picture and each output at the same display scale
///   (each output is drawn at the before picture's scale factor, so a 2× downscale looks
///   half the size), each a link to the full-size file, except that a panorama (a picture
///   at least `panorama` times as long as it is wide) keeps a short side of
///   `minimumShortSide` (`drawnSize`); a wipe slider (an `<input type=range>` over a
///   stacked pair: before and after, or A and B when two pipelines are compared); the
///   100 % crops (the centre of the input and of each output at natural pixel size,
///   256×256 at most; the whole input instead when an output is cut to another shape, as
///   its centre is then another part of the picture); each failure once; and the time of
///   each step.
/// - More than `compactThreshold` samples: a compact grid of smaller cards.
///
/// After loading, the page counts what rendered into `body` attributes the tests read
/// through headless Chromium: `data-rendered` of `data-total` pictures, `data-sliders`,
/// and `data-summary-samples` (the sample count the summary states).
struct ContactSheet {
    /// Above this many samples the sheet is a compact grid.
    static let compactThreshold = 12

    /// Each pipeline's name, in order (one, or two when compared).
    let titles: [String]
    /// Each column's name (`DryRun.columnLabels`): a column is one output of one pipeline.
    let labels: [String]
    /// Each column's pipeline (an index into `titles`).
    let owners: [Int]
    /// Each column's op names (its pipeline's filters, then its output's).
    let chains: [[String]]
    /// Each sample's rows, one per column, in listing order.
    let samples: [[DryRunRow]]

    var compact: Bool { samples.count > Self.compactThreshold }
    /// The longest side of the before picture on screen, in CSS pixels.
    var box: Double { compact ? 160 : 360 }
    /// The side of a 100 % crop window, in CSS pixels.
    var cropSide: Int { compact ? 128 : 256 }
    /// How many times longer than wide a picture is to count as a panorama.
    static let panorama = 4.0
    /// The short side a panorama is drawn with at least (unless it is smaller itself), in
    /// CSS pixels: fitted by its long side it would be a sliver (4000×200 in 360 is 18 high).
    var minimumShortSide: Double { compact ? 48 : 72 }
    /// The longest side a panorama is drawn with; its card spans the compact grid's row.
    static let panoramaSide = 1080.0

    /// The size a `width`×`height` picture is drawn at with the card's `scale`: scaled,
    /// except a panorama whose short side would fall under `minimumShortSide`, drawn larger
    /// (never larger than itself, its long side at most `panoramaSide`).
    func drawnSize(_ width: Int, _ height: Int, scale: Double) -> (Int, Int) {
        let factor = drawnScale(width, height, scale: scale)
        return (max(1, Int((Double(width) * factor).rounded())), max(1, Int((Double(height) * factor).rounded())))
    }

    /// The factor `drawnSize` draws a `width`×`height` picture with.
    func drawnScale(_ width: Int, _ height: Int, scale: Double) -> Double {
        let (short, long) = (Double(max(1, min(width, height))), Double(max(1, width, height)))
        guard long / short >= Self.panorama, short * scale < minimumShortSide else { return scale }
        return max(scale, min(1, minimumShortSide / short, Self.panoramaSide / long))
    }

    /// A sample's failures, each once: a pipeline whose outputs all failed alike (a source
    /// that cannot be decoded fails every output) gives one, named by the pipeline (nil
    /// with one pipeline, `A` or `B` when two are compared); any other failure is named
    /// by its column (nil when there is one column).
    func failures(_ rows: [DryRunRow]) -> [(label: String?, message: String)] {
        var out: [(label: String?, message: String)] = []
        for owner in titles.indices {
            let columns = owners.indices.filter { owners[$0] == owner }
            let messages = columns.map { rows[$0].failure }
            if columns.count > 1, let first = messages.first ?? nil, messages.allSatisfy({ $0 == first }) {
                out.append((titles.count == 1 ? nil : ["A", "B"][owner], first))
                continue
            }
            for column in columns {
                if let failure = rows[column].failure { out.append((labels.count == 1 ? nil : labels[column], failure)) }
            }
        }
        return out
    }

    var html: String {
        let failed = samples.filter { rows in rows.contains { $0.failure != nil } }
        let ordered = failed + samples.filter { rows in rows.allSatisfy { $0.failure == nil } }
        var out = head
        out +=
            "<body class=\"\(compact ? "compact" : "full")\" data-rendered=\"0\" data-total=\"0\" data-sliders=\"0\" data-summary-samples=\"0\">\n"
        out += "<h1>\(escape(titles.joined(separator: " vs ")))</h1>\n"
        for (index, chain) in chains.enumerated() {
            let label =
                labels.count == 1
                ? ""
                : titles.count == 1
                    ? "\(escape(labels[index])): "
                    : "\(escape(labels[index])) (\(escape(titles[owners[index]]))): "
            out +=
                "<div class=\"chain\">\(label)\(chain.isEmpty ? "no filters" : chain.map(escape).joined(separator: " → "))</div>\n"
        }
        out += summary(failed: failed)
        out += "<div class=\"samples\">\n"
        for (number, rows) in ordered.enumerated() { out += card(rows, number: number + 1) }
        out += "</div>\n" + script + "</body></html>\n"
        return out
    }

    // MARK: summary

    private func summary(failed: [[DryRunRow]]) -> String {
        var out = "<section id=\"summary\" data-samples=\"\(samples.count)\" data-failed=\"\(failed.count)\">\n"
        out +=
            "<p><b>\(samples.count) sample\(samples.count == 1 ? "" : "s")</b>"
            + (failed.isEmpty ? ", none failed" : ", <span class=\"failed\">\(failed.count) failed</span>") + "</p>\n"
        if !failed.isEmpty {
            out += "<ul class=\"failures\">\n"
            for rows in failed {
                let reasons = failures(rows).map { ($0.label.map { $0 + ": " } ?? "") + $0.message }
                out +=
                    "<li><a href=\"#\(anchor(rows[0].key))\">\(escape(rows[0].key))</a>: \(escape(reasons.joined(separator: "; ")))</li>\n"
            }
            out += "</ul>\n"
        }
        out +=
            "<table><tr><th></th><th>bytes before → after</th><th>per image</th><th>SSIM (mean)</th><th>time per image (median / mean)</th></tr>\n"
        for index in labels.indices {
            let done = samples.map { $0[index] }.filter { $0.failure == nil && $0.outputBytes != nil }
            let before = done.reduce(0) { $0 + $1.inputBytes }
            let after = done.reduce(0) { $0 + ($1.outputBytes ?? 0) }
            let scores = done.compactMap(\.ssim)
            let times = done.map(\.milliseconds).sorted()
            let name =
                labels.count == 1
                ? "\(done.count) done"
                : titles.count == 1
                    ? "\(escape(labels[index])): \(done.count) done"
                    : "\(escape(labels[index])): \(escape(titles[owners[index]]))"
            var cells = [name]
            if done.isEmpty {
                cells += ["–", "–", "–", "–"]
            } else {
                cells.append("\(bytes(before)) → \(bytes(after)) (\(saving(before, after)))")
                cells.append("\(bytes(before / done.count)) → \(bytes(after / done.count))")
                cells.append(scores.isEmpty ? "n/a" : String(format: "%.4f", scores.reduce(0, +) / Double(scores.count)))
                let median =
                    times.count % 2 == 1 ? times[times.count / 2] : (times[times.count / 2 - 1] + times[times.count / 2]) / 2
                cells.append(String(format: "%.1f ms / %.1f ms", median, times.reduce(0, +) / Double(times.count)))
            }
            out += "<tr class=\"pipeline\">" + cells.map { "<td>\($0)</td>" }.joined() + "</tr>\n"
        }
        return out + "</table>\n</section>\n"
    }

    // MARK: one sample

    private func card(_ rows: [DryRunRow], number: Int) -> String {
        let first = rows[0]
        let failed = rows.contains { $0.failure != nil }
        // One scale for every picture of the card: the before picture's (as a panorama is
        // drawn, when it is one: a square output of it would be a speck otherwise).
        let scale = first.uprightWidth.flatMap { width in
            first.uprightHeight.map { height in
                drawnScale(width, height, scale: min(1, box / Double(max(width, height, 1))))
            }
        }
        func size(_ width: Int?, _ height: Int?) -> (Int, Int)? {
            guard let scale, let width, let height else { return nil }
            return drawnSize(width, height, scale: scale)
        }
        // A panorama drawn wider than the box takes the whole row of the compact grid.
        let wide = size(first.uprightWidth, first.uprightHeight).map { Double(max($0.0, $0.1)) > box } ?? false
        var out =
            "<section class=\"sample\(failed ? " has-failure" : "")\(wide ? " wide" : "")\" id=\"\(anchor(first.key))\">"
            + "<h2>\(escape(first.key))</h2>\n"
        out += "<div class=\"pair\">\n"
        if let before = first.before {
            out += figure(
                src: before, link: first.source ?? before, size: size(first.uprightWidth, first.uprightHeight),
                caption: "before: \(dimensions(first.uprightWidth, first.uprightHeight)), \(bytes(first.inputBytes))")
        }
        for failure in failures(rows) {
            out += "<p class=\"failed\">\(failure.label.map { escape($0) + " " } ?? "")failed: \(escape(failure.message))</p>\n"
        }
        for (index, row) in rows.enumerated() where row.failure == nil {
            if let display = row.display ?? row.output {
                var caption = "\(labels[index]): \(dimensions(row.outputWidth, row.outputHeight)), \(bytes(row.outputBytes ?? 0))"
                caption +=
                    " (\(saving(row.inputBytes, row.outputBytes ?? 0))), SSIM \(row.ssim.map { String(format: "%.4f", $0) } ?? "n/a")"
                caption += String(format: ", %.1f ms", row.milliseconds)
                out += figure(src: display, link: display, size: size(row.outputWidth, row.outputHeight), caption: caption)
            }
        }
        out += "</div>\n"
        out += "<div class=\"tools\">\n" + wipe(rows, size: size(first.uprightWidth, first.uprightHeight)) + crops(rows)
        for (index, row) in rows.enumerated() where !row.steps.isEmpty {
            out +=
                "<table class=\"steps\">" + (rows.count > 1 ? "<tr><th colspan=\"2\">\(labels[index])</th></tr>" : "")
                + row.steps.map { step in
                    "<tr><td>\(escape(step.op))</td><td class=\"ms\">\(String(format: "%.1f", step.milliseconds)) ms</td></tr>"
                }.joined() + "</table>\n"
        }
        return out + "</div>\n</section>\n"
    }

    /// Before and after (or A and B) stacked in one box, the upper one clipped at the
    /// slider: left of it the first picture, right of it the second.
    private func wipe(_ rows: [DryRunRow], size: (Int, Int)?) -> String {
        let pictures: [(String, String)]
        if titles.count == 1 {
            // One pipeline: before against its (first) output.
            guard let before = rows[0].before, let after = rows[0].display ?? rows[0].output else { return "" }
            pictures = [(before, "before"), (after, labels[0])]
        } else {
            // Two pipelines: the first output of each.
            guard let second = owners.firstIndex(of: 1), let a = rows[0].display ?? rows[0].output,
                let b = rows[second].display ?? rows[second].output
            else { return "" }
            pictures = [(a, labels[0]), (b, labels[second])]
        }
        let (width, height) = size ?? (Int(box), Int(box))
        return """
            <div class="wipe" style="width: \(width)px; height: \(height)px">\
            <img class="under" src="\(encoded(pictures[0].0))" alt="\(escape(pictures[0].1))">\
            <img class="over" src="\(encoded(pictures[1].0))" alt="\(escape(pictures[1].1))">\
            <span class="tag left">\(pictures[0].1)</span><span class="tag right">\(pictures[1].1)</span>\
            <input type="range" class="wipe-slider" min="0" max="100" value="50" aria-label="wipe between \(pictures[0].1) and \(pictures[1].1)">\
            </div>

            """
    }

    /// The centre of the input (its own file) and of each output (the display picture,
    /// not scaled: `object-fit: none`) at natural pixel size.
    private func crops(_ rows: [DryRunRow]) -> String {
        var figures: [String] = []
        if let crop = rows[0].crop, let width = rows[0].uprightWidth, let height = rows[0].uprightHeight,
            rows[0].cropIsWhole == true
        {
            // An output cut to another shape: the whole input, fitted in the crop window.
            let scale = min(1, Double(cropSide) / Double(max(width, height, 1)))
            let style =
                "width: \(max(1, Int((Double(width) * scale).rounded())))px; "
                + "height: \(max(1, Int((Double(height) * scale).rounded())))px; object-fit: contain"
            figures.append(
                "<figure><img class=\"crop whole\" style=\"\(style)\" src=\"\(encoded(crop))\" alt=\"before, whole\"><figcaption>before, whole (the outputs are cut from it)</figcaption></figure>"
            )
        } else if let crop = rows[0].crop, let width = rows[0].uprightWidth, let height = rows[0].uprightHeight {
            let style = "width: \(min(width, cropSide))px; height: \(min(height, cropSide))px"
            figures.append(
                "<figure><img class=\"crop\" style=\"\(style)\" src=\"\(encoded(crop))\" alt=\"before, 100 %\"><figcaption>before, 100 %</figcaption></figure>"
            )
        }
        for (index, row) in rows.enumerated() {
            guard row.failure == nil, let display = row.display ?? row.output, let width = row.outputWidth,
                let height = row.outputHeight
            else { continue }
            let style = "width: \(min(width, cropSide))px; height: \(min(height, cropSide))px"
            figures.append(
                "<figure><img class=\"crop\" style=\"\(style)\" src=\"\(encoded(display))\" alt=\"\(labels[index]), 100 %\"><figcaption>\(labels[index]), 100 %</figcaption></figure>"
            )
        }
        return figures.joined(separator: "\n") + "\n"
    }

    private func figure(src: String, link: String, size: (Int, Int)?, caption: String) -> String {
        let attributes = size.map { " width=\"\($0.0)\" height=\"\($0.1)\"" } ?? ""
        return "<figure><a href=\"\(encoded(link))\"><img src=\"\(encoded(src))\"\(attributes) alt=\"\(escape(src))\"></a>"
            + "<figcaption>\(escape(caption))</figcaption></figure>\n"
    }

    // MARK: text

    private func dimensions(_ width: Int?, _ height: Int?) -> String {
        guard let width, let height else { return "?" }
        return "\(width)×\(height)"
    }

    private func bytes(_ count: Int) -> String {
        count >= 1_048_576
            ? String(format: "%.1f MB", Double(count) / 1_048_576)
            : count >= 1024 ? String(format: "%.1f KB", Double(count) / 1024) : "\(count) B"
    }

    /// `63 % saved`, or `12 % larger`.
    private func saving(_ before: Int, _ after: Int) -> String {
        guard before > 0 else { return "–" }
        let change = Double(before - after) / Double(before) * 100
        return change >= 0 ? String(format: "%.0f %% saved", change) : String(format: "%.0f %% larger", -change)
    }

    /// A relative path with each component percent-encoded, then HTML-escaped.
    private func encoded(_ path: String) -> String {
        escape(
            path.split(separator: "/", omittingEmptySubsequences: false)
                .map { String($0).addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? String($0) }
                .joined(separator: "/"))
    }

    private func anchor(_ key: String) -> String {
        "sample-" + FeedItem.safeName(key)
    }

    private func escape(_ text: String) -> String { text.printable.xmlEscaped }

    // MARK: page

    private var head: String {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8">
        <title>imgpipe dry-run: \(escape(titles.joined(separator: " vs ")))</title>
        <style>
        body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; background: #f4f4f4; color: #222; }
        h1 { font-size: 20px; margin: 0 0 4px; } .chain { color: #555; }
        #summary { background: #fff; border-radius: 8px; padding: 12px 16px; margin: 16px 0; box-shadow: 0 1px 3px #0002; }
        #summary p { margin: 0 0 6px; } #summary th, #summary td { text-align: left; padding: 2px 14px 2px 0; }
        .sample { background: #fff; border-radius: 8px; padding: 12px 16px; margin-bottom: 16px; box-shadow: 0 1px 3px #0002; }
        .sample h2 { font-size: 15px; margin: 0 0 8px; word-break: break-all; }
        .pair, .tools { display: flex; gap: 16px; flex-wrap: wrap; align-items: flex-start; margin-bottom: 10px; }
        figure { margin: 0; } figcaption { color: #555; font-size: 12px; margin-top: 4px; max-width: 360px; }
        img { display: block; background: repeating-conic-gradient(#ddd 0% 25%, #fff 0% 50%) 50% / 16px 16px; }
        .pair img:not([width]) { max-width: 360px; max-height: 360px; }
        img.crop { object-fit: none; object-position: 50% 50%; image-rendering: pixelated; }
        .wipe { position: relative; margin-bottom: 30px; user-select: none; }
        .wipe img { position: absolute; inset: 0; width: 100%; height: 100%; object-fit: contain; }
        .wipe img.over { clip-path: inset(0 0 0 50%); }
        .wipe .tag { position: absolute; top: 4px; font-size: 11px; background: #000a; color: #fff; padding: 0 4px; border-radius: 3px; }
        .wipe .left { left: 4px; } .wipe .right { right: 4px; }
        .wipe input { position: absolute; left: 0; right: 0; bottom: -22px; width: 100%; margin: 0; }
        table { border-collapse: collapse; font-size: 12px; }
        td { padding: 1px 10px 1px 0; } td.ms { text-align: right; }
        .failed { color: #b00020; font-weight: 600; } .has-failure { border-left: 4px solid #b00020; }
        body.compact .samples { display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 12px; }
        body.compact .sample { margin: 0; padding: 8px 10px; } body.compact .sample h2 { font-size: 13px; }
        body.compact .sample.wide { grid-column: 1 / -1; }
        body.compact .pair img:not([width]) { max-width: 160px; max-height: 160px; } body.compact figcaption { max-width: 200px; }
        </style></head>

        """
    }

    private var script: String {
        """
        <script>
        document.querySelectorAll(".wipe").forEach(function (wipe) {
          var slider = wipe.querySelector("input"), over = wipe.querySelector("img.over");
          slider.addEventListener("input", function () { over.style.clipPath = "inset(0 0 0 " + slider.value + "%)"; });
        });
        window.addEventListener("load", function () {
          var images = Array.prototype.slice.call(document.images);
          var rendered = images.filter(function (img) { return img.complete && img.naturalWidth > 0; });
          images.forEach(function (img) { img.dataset.ok = String(img.complete && img.naturalWidth > 0); });
          var summary = document.getElementById("summary");
          document.body.dataset.total = String(images.length);
          document.body.dataset.rendered = String(rendered.length);
          document.body.dataset.sliders = String(document.querySelectorAll(".sample .wipe input[type=range]").length);
          document.body.dataset.summarySamples = summary ? summary.dataset.samples : "0";
        });
        </script>

        """
    }
}
