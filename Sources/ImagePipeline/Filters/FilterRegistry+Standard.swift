extension FilterRegistry {
    /// Every op imgpipe knows.
    public static let standard = FilterRegistry(definitions: [
        FilterDefinition(
            name: "autorotate",
            summary: "Turn the image upright from its EXIF orientation tag, and drop the tag.",
            parameters: []
        ) { _ in .autorotate },
        FilterDefinition(
            name: "fit",
            summary: "Resize to fit inside width×height, keeping the aspect ratio; never enlarges unless enlarge is true.",
            parameters: [
                ParameterDefinition("width", .integer(1 ... Int.max), "box width in pixels (omit for no limit)"),
                ParameterDefinition("height", .integer(1 ... Int.max), "box height in pixels (omit for no limit)"),
                ParameterDefinition("enlarge", .boolean, default: .bool(false), "also scale up images smaller than the box"),
            ]
        ) { arguments in
            let width = arguments.int("width")
            let height = arguments.int("height")
            guard width != nil || height != nil else { throw arguments.fail("fit needs width, height or both") }
            return .fit(width: width, height: height, enlarge: arguments.bool("enlarge") ?? false)
        },
        FilterDefinition(
            name: "fill",
            summary: "Scale to cover width×height, then crop to exactly that size around gravity.",
            parameters: [
                ParameterDefinition("width", .integer(1 ... Int.max), required: true, "output width in pixels"),
                ParameterDefinition("height", .integer(1 ... Int.max), required: true, "output height in pixels"),
                ParameterDefinition("gravity", .choice(Gravity.names), default: .string("centre"),
                                    "what to keep: centre, a compass point, attention or entropy"),
            ]
        ) { arguments in
            guard let width = arguments.int("width"), let height = arguments.int("height"),
                  let gravity = Gravity(name: arguments.string("gravity") ?? "centre") else {
                throw arguments.fail("fill needs width and height")
            }
            return .fill(width: width, height: height, gravity: gravity)
        },
        FilterDefinition(
            name: "grayscale",
            summary: "Convert to 8-bit greyscale; alpha is kept.",
            parameters: []
        ) { _ in .grayscale },
    ])
}
