import GRDB
import PipelineKit

extension Row {
    /// The value at `index`, nil for NULL: as `self[index] as Value?`, without the generic
    /// metadata lookup that costs as much as the read itself on a hot path.
    @inline(__always)
    func optional<Value: DatabaseValueConvertible & StatementColumnConvertible>(_ index: Int) -> Value? {
        hasNull(atIndex: index) ? nil : (self[index] as Value)
    }
}
