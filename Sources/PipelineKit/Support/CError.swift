import Foundation

/// An `errno` value, as `strerror` says it (taken when made: `CError()` right after the call).
package struct CError: Error, CustomStringConvertible {
    package let code: Int32
    package init(_ code: Int32 = errno) { self.code = code }
    package var description: String { String(cString: strerror(code)) }
}
