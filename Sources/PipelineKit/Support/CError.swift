import Foundation

/// An `errno` value, as `strerror` says it (taken when made: `CError()` right after the call).
struct CError: Error, CustomStringConvertible {
    let code: Int32
    init(_ code: Int32 = errno) { self.code = code }
    var description: String { String(cString: strerror(code)) }
}
