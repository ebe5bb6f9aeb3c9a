/// Where a crop keeps its window: a compass point, the centre, or what libvips finds most
/// interesting (`attention`: skin, saturation, edges; `entropy`: detail).
public enum Gravity: String, Sendable, CaseIterable {
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

    /// The names accepted in a pipeline file (`center` is taken as `centre`).
    public static var names: [String] { allCases.map(\.rawValue) }

    init?(name: String) {
        self.init(rawValue: name == "center" ? "centre" : name)
    }

    /// The top-left corner of a `width`×`height` window in a `fullWidth`×`fullHeight` image,
    /// for the compass gravities (the smart ones are done by libvips).
    func offset(width: Int, height: Int, fullWidth: Int, fullHeight: Int) -> (x: Int, y: Int) {
        let spareX = max(0, fullWidth - width)
        let spareY = max(0, fullHeight - height)
        let x: Int
        let y: Int
        switch self {
        case .west, .northWest, .southWest: x = 0
        case .east, .northEast, .southEast: x = spareX
        default: x = spareX / 2
        }
        switch self {
        case .north, .northWest, .northEast: y = 0
        case .south, .southWest, .southEast: y = spareY
        default: y = spareY / 2
        }
        return (x, y)
    }
}

/// One validated filter operation, ready to run.
public enum FilterStep: Sendable, Equatable {
    /// Apply the EXIF orientation.
    case autorotate
    /// Fit inside `width`×`height` (a missing side is unbounded), aspect kept, never
    /// enlarged unless `enlarge`.
    case fit(width: Int?, height: Int?, enlarge: Bool)
    /// Cover `width`×`height`, then crop to exactly that size around `gravity`.
    case fill(width: Int, height: Int, gravity: Gravity)
    /// Convert to 8-bit greyscale, alpha kept.
    case grayscale
}
