import Foundation

/// The dry-run's `index.html`: every sample before and after, side by side, with
/// dimensions, bytes and the time of each step. One self-contained file that opens from
/// disk; images are referenced relative to it. After loading, the page counts the
/// pictures that rendered into `body[data-rendered]` (of `data-total`), which the tests
/// read through headless Chromium.
struct ContactSheet {
    let title: String
    let filters: [String]
    let rows: [DryRunRow]

    var html: String {
        var out = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <title>imgpipe dry-run: \(escape(title))</title>
            <style>
            body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; background: #f4f4f4; color: #222; }
            h1 { font-size: 20px; margin: 0 0 4px; } .chain { color: #555; margin-bottom: 20px; }
            .sample { background: #fff; border-radius: 8px; padding: 12px 16px; margin-bottom: 16px; box-shadow: 0 1px 3px #0002; }
            .sample h2 { font-size: 15px; margin: 0 0 8px; word-break: break-all; }
            .pair { display: flex; gap: 16px; flex-wrap: wrap; align-items: flex-start; }
            figure { margin: 0; } figcaption { color: #555; font-size: 12px; margin-top: 4px; }
            img { max-width: 480px; max-height: 480px; display: block;
                  background: repeating-conic-gradient(#ddd 0% 25%, #fff 0% 50%) 50% / 16px 16px; }
            table { border-collapse: collapse; font-size: 12px; margin-top: 8px; }
            td { padding: 1px 10px 1px 0; } td.ms { text-align: right; }
            .failed { color: #b00020; font-weight: 600; }
            </style></head>
            <body data-rendered="0" data-total="0">
            <h1>\(escape(title))</h1>
            <div class="chain">\(filters.isEmpty ? "no filters" : filters.map(escape).joined(separator: " → "))</div>

            """
        for row in rows {
            out += "<section class=\"sample\"><h2>\(escape(row.key))</h2><div class=\"pair\">\n"
            if let before = row.before {
                out += figure(src: before, caption: "before: \(size(row.inputWidth, row.inputHeight)), \(bytes(row.inputBytes))")
            }
            if let failure = row.failure {
                out += "<p class=\"failed\">failed: \(escape(failure))</p>\n"
            } else if let display = row.display ?? row.output {
                out += figure(src: display, caption: "after: \(size(row.outputWidth, row.outputHeight)), \(bytes(row.outputBytes ?? 0)), \(String(format: "%.1f", row.milliseconds)) ms")
            }
            out += "</div>\n"
            if !row.steps.isEmpty {
                out += "<table>" + row.steps.map { step in
                    "<tr><td>\(escape(step.op))</td><td class=\"ms\">\(String(format: "%.1f", step.milliseconds)) ms</td></tr>"
                }.joined() + "</table>\n"
            }
            out += "</section>\n"
        }
        out += """
            <script>
            window.addEventListener("load", function () {
              var images = Array.prototype.slice.call(document.images);
              var rendered = images.filter(function (img) { return img.complete && img.naturalWidth > 0; });
              images.forEach(function (img) { img.dataset.ok = String(img.complete && img.naturalWidth > 0); });
              document.body.dataset.total = String(images.length);
              document.body.dataset.rendered = String(rendered.length);
            });
            </script>
            </body></html>

            """
        return out
    }

    private func figure(src: String, caption: String) -> String {
        let path = src.split(separator: "/").map { String($0).addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? String($0) }
            .joined(separator: "/")
        return "<figure><img src=\"\(escape(path))\" alt=\"\(escape(src))\"><figcaption>\(escape(caption))</figcaption></figure>\n"
    }

    private func size(_ width: Int?, _ height: Int?) -> String {
        guard let width, let height else { return "?" }
        return "\(width)×\(height)"
    }

    private func bytes(_ count: Int) -> String {
        count >= 1_048_576 ? String(format: "%.1f MB", Double(count) / 1_048_576)
            : count >= 1024 ? String(format: "%.1f KB", Double(count) / 1024) : "\(count) B"
    }

    private func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
