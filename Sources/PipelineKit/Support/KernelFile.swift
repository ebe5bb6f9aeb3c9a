import Foundation

/// Writes `text` to a file of the kernel's (`/proc/thread-self/comm`, `/proc/self/oom_score_adj`)
/// in one write; a file that cannot be opened is left as it is (these are niceties, not needs).
package func writeKernelFile(_ path: String, _ text: String) {
    let file = open(path, O_WRONLY | O_CLOEXEC)
    guard file >= 0 else { return }
    _ = text.withCString { write(file, $0, strlen($0)) }
    close(file)
}
