import Foundation
import ImagePipeline
import Testing

@testable import PipelineKit

/// `${…}` values: masked in every form, and recorded as references that give back exactly
/// the text they replaced.
@Suite("Environment")
struct EnvironmentTests {
    @Test func everyFormIsMaskedAndComesBackAsItWas() throws {
        let environment = Environment(["KEY": "ab+c/d= x"])
        #expect(environment.value(of: "KEY") == "ab+c/d= x")
        let encoded = try #require("ab+c/d= x".addingPercentEncoding(withAllowedCharacters: .alphanumerics))
        for text in ["https://h/i.jpg?sig=\(encoded)&n=1", "{\"k\": \"ab+c\\/d= x\"}", "q=ab%2Bc%2Fd%3D+x", "raw ab+c/d= x"] {
            let recorded = environment.recorded(text)
            #expect(!recorded.contains("ab+c") && !recorded.contains("ab%2Bc"), "\(recorded)")
            #expect(environment.redact(text).contains("***"))
            #expect(environment.restored(recorded) == text, "\(text) → \(recorded) → \(environment.restored(recorded))")
        }
        #expect(environment.recorded("raw ab+c/d= x") == "raw ${KEY}")
    }

    /// Text that holds `${…}`, `$$` or a lone `$` of its own comes back as it was, with the
    /// secret's references expanded and nothing else: `${KEY}` written by a feed is never
    /// the value of KEY.
    @Test func foreignReferencesAreRecordedAsTextAndComeBackAsText() {
        let environment = Environment(["KEY": "s3cr3t-value"])
        #expect(environment.value(of: "KEY") == "s3cr3t-value")
        let texts = [
            "u?k=${KEY}", "u?k=$${KEY}", "${KEY:1}", "$", "a$", "$$", "$$$", "${", "$}{", "price $5",
            "s3cr3t-value$${KEY}", "${KEY}s3cr3t-value$", "x=s3cr3t-value&y=${UNSET}", "é$€${KEY",
        ]
        for text in texts {
            let recorded = environment.recorded(text)
            #expect(!recorded.contains("s3cr3t-value"), "\(recorded)")
            #expect(environment.restored(recorded) == text, "\(text) → \(recorded) → \(environment.restored(recorded))")
        }
        #expect(environment.recorded("x=s3cr3t-value&y=${KEY}") == "x=${KEY}&y=$${KEY}")
        #expect(environment.restored("u?k=$${KEY}") == "u?k=${KEY}")
        // What has no `${` or `$$` is recorded as it is (state files written before the escape read the same).
        #expect(environment.recorded("a$b") == "a$b")
    }
}
