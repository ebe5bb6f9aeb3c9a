import Foundation
import ImagePipeline
import Testing

/// `${…}` values: masked in every form, and recorded as references that give back exactly
/// the text they replaced.
@Suite("Environment")
struct EnvironmentTests {
    @Test func everyFormIsMaskedAndComesBackAsItWas() throws {
        let environment = Environment(["KEY": "ab+c/d= x"])
        #expect(environment.value(of: "KEY") == "ab+c/d= x")
        let encoded = try #require("ab+c/d= x".addingPercentEncoding(withAllowedCharacters: .alphanumerics))
        for text in ["https://h/i.jpg?sig=\(encoded)&n=1", "{\"k\": \"ab+c\\/d= x\"}", "q=ab%2Bc%2Fd%3D+x", "raw ab+c/d= x"] {
            let recorded = environment.unexpanded(text)
            #expect(!recorded.contains("ab+c") && !recorded.contains("ab%2Bc"), "\(recorded)")
            #expect(environment.redact(text).contains("***"))
            #expect(environment.expanding(recorded) == text, "\(text) → \(recorded) → \(environment.expanding(recorded))")
        }
        #expect(environment.unexpanded("raw ab+c/d= x") == "raw ${KEY}")
    }
}
