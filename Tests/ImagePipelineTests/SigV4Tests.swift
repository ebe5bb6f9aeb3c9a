import Foundation
import Testing

@testable import ImagePipeline
@testable import PipelineKit

/// The SigV4 signer against published vectors, never against its own output.
///
/// Source of the generic cases: AWS's "Signature Version 4 test suite"
/// (`aws-sig-v4-test-suite`, https://docs.aws.amazon.com/general/latest/gr/signature-v4-test-suite.html):
/// service `service`, region `us-east-1`, key `AKIDEXAMPLE`, secret
/// `wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY`, time 20150830T123600Z. The canonical request
/// and string to sign of `get-vanilla` are the suite's `get-vanilla.creq` and `.sts`; each
/// `Authorization` is the case's `.authz`, as the suite is transcribed in aws-sdk-js-v3
/// (`packages/signature-v4/src/suite.fixture.ts`). The S3 case is the GET example of the S3
/// API reference ("Signature calculations for the Authorization header", examplebucket,
/// 20130524T000000Z).
@Suite("SigV4 signing")
struct SigV4Tests {
    static let suiteDate = Date(timeIntervalSince1970: 1_440_938_160)  // 2015-08-30T12:36:00Z
    static let suiteSigner = SigV4Signer(
        credentials: S3Credentials(accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
        region: "us-east-1", service: "service", encodesPathTwice: true)
    static let credential = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "

    func suite(
        _ method: String = "GET", path: String = "/", query: String = "", headers: [String: String] = [:],
        body: String = "", signer: SigV4Signer = suiteSigner
    ) -> SigV4Signer.Signature {
        signer.sign(
            method: method, host: "example.amazonaws.com", path: path, query: query, headers: headers,
            payloadHash: sha256Hex(body), date: Self.suiteDate)
    }

    @Test func getVanilla() {
        let signed = suite()
        // get-vanilla.creq
        #expect(
            signed.canonicalRequest == """
                GET
                /

                host:example.amazonaws.com
                x-amz-date:20150830T123600Z

                host;x-amz-date
                e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                """)
        // get-vanilla.sts
        #expect(
            signed.stringToSign == """
                AWS4-HMAC-SHA256
                20150830T123600Z
                20150830/us-east-1/service/aws4_request
                bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63
                """)
        // get-vanilla.authz
        #expect(
            signed.authorization == Self.credential
                + "SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
        #expect(signed.headers["x-amz-date"] == "20150830T123600Z")
    }

    @Test func getVanillaQueryOrderKeyCase() {
        #expect(
            suite(query: "Param2=value2&Param1=value1").authorization == Self.credential
                + "SignedHeaders=host;x-amz-date, Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
    }

    @Test func getVanillaEmptyQueryKey() {
        #expect(
            suite(query: "Param1=value1").authorization == Self.credential
                + "SignedHeaders=host;x-amz-date, Signature=a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb")
    }

    @Test func getUTF8InBothPathRules() {
        let expected =
            Self.credential
            + "SignedHeaders=host;x-amz-date, Signature=8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"
        let signed = suite(path: "/ሴ")
        #expect(signed.canonicalRequest.split(separator: "\n")[1] == "/%E1%88%B4")
        #expect(signed.authorization == expected)
        // S3's rule: the request line's path (already encoded) is encoded once, not twice.
        let s3Rule = SigV4Signer(credentials: Self.suiteSigner.credentials, region: "us-east-1", service: "service")
        #expect(suite(path: "/%E1%88%B4", signer: s3Rule).authorization == expected)
    }

    @Test func theGenericRuleEncodesThePathTwiceAndS3Once() {
        let s3Rule = SigV4Signer(credentials: Self.suiteSigner.credentials, region: "us-east-1", service: "s3")
        #expect(Self.suiteSigner.canonicalURI("/a%20b/c") == "/a%2520b/c")
        #expect(s3Rule.canonicalURI("/a%20b/c") == "/a%20b/c")
        #expect(s3Rule.canonicalURI("/photos/a b+c.jpg") == "/photos/a%20b%2Bc.jpg")
    }

    @Test func getVanillaQueryUnreservedAndUTF8Query() {
        let unreserved = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
        #expect(
            suite(query: "\(unreserved)=\(unreserved)").authorization == Self.credential
                + "SignedHeaders=host;x-amz-date, Signature=9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197")
        #expect(
            suite(query: "%E1%88%B4=bar").authorization == Self.credential
                + "SignedHeaders=host;x-amz-date, Signature=2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04")
    }

    @Test func getHeaderValueTrim() {
        let signed = suite(headers: ["My-Header1": " value1", "My-Header2": "\"a   b   c\""])
        #expect(signed.canonicalRequest.contains("my-header1:value1\nmy-header2:\"a b c\"\n"))
        #expect(
            signed.authorization == Self.credential
                + "SignedHeaders=host;my-header1;my-header2;x-amz-date, Signature=acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"
        )
    }

    @Test func postVanillaQuery() {
        #expect(
            suite("POST", query: "Param1=value1").authorization == Self.credential
                + "SignedHeaders=host;x-amz-date, Signature=28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11")
    }

    @Test func postVanillaQueryNonunreserved() {
        // `@#$%^` = "" and `+` = "/,?><`";:\|][{}", percent-encoded as on the request line.
        let query = "%40%23%24%25%5E=&%2B=%2F%2C%3F%3E%3C%60%22%3B%3A%5C%7C%5D%5B%7B%7D"
        #expect(
            suite("POST", query: query).authorization == Self.credential
                + "SignedHeaders=host;x-amz-date, Signature=66c82657c86e26fb25238d0e69f011edc4c6df5ae71119d7cb98ed9b87393c1e")
    }

    @Test func postXWWWFormURLEncoded() {
        let signed = suite("POST", headers: ["Content-Type": "application/x-www-form-urlencoded"], body: "Param1=value1")
        // post-x-www-form-urlencoded.creq
        #expect(
            signed.canonicalRequest == """
                POST
                /

                content-type:application/x-www-form-urlencoded
                host:example.amazonaws.com
                x-amz-date:20150830T123600Z

                content-type;host;x-amz-date
                9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e
                """)
        #expect(
            signed.authorization == Self.credential
                + "SignedHeaders=content-type;host;x-amz-date, Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"
        )
    }

    /// The S3 API reference's GET Object example: S3's path rule, `x-amz-content-sha256`
    /// signed, a `Range` header.
    @Test func s3GetObjectExample() {
        let signer = SigV4Signer(
            credentials: S3Credentials(
                accessKeyId: "AKIAIOSFODNN7EXAMPLE",
                secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
            region: "us-east-1")
        let empty = SigV4Signer.emptyPayloadHash
        let signed = signer.sign(
            method: "GET", host: "examplebucket.s3.amazonaws.com", path: "/test.txt", query: "",
            headers: ["Range": "bytes=0-9", "x-amz-content-sha256": empty], payloadHash: empty,
            date: Date(timeIntervalSince1970: 1_369_353_600))
        #expect(signed.stringToSign.hasSuffix("7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"))
        #expect(
            signed.authorization == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
                + "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
                + "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    @Test func aSessionTokenIsSentAndSigned() {
        let signer = SigV4Signer(
            credentials: S3Credentials(accessKeyId: "AKID", secretAccessKey: "secret", sessionToken: "tok"),
            region: "eu-west-1")
        let signed = signer.sign(
            method: "PUT", host: "h", path: "/b/k", query: "", headers: [:],
            payloadHash: SigV4Signer.emptyPayloadHash, date: Self.suiteDate)
        #expect(signed.headers["x-amz-security-token"] == "tok")
        #expect(signed.canonicalRequest.contains("x-amz-security-token:tok\n"))
        #expect(signed.authorization.contains("SignedHeaders=host;x-amz-date;x-amz-security-token,"))
        // The token is signed: the same request without it has another signature.
        let without = SigV4Signer(credentials: S3Credentials(accessKeyId: "AKID", secretAccessKey: "secret"), region: "eu-west-1")
            .sign(
                method: "PUT", host: "h", path: "/b/k", query: "", headers: [:], payloadHash: SigV4Signer.emptyPayloadHash,
                date: Self.suiteDate)
        #expect(without.authorization.split(separator: "=").last != signed.authorization.split(separator: "=").last)
    }

    /// Addressing: virtual-hosted for AWS, path-style with an endpoint or a dotted bucket;
    /// keys encoded once per segment, a query name without a value sent bare.
    @Test func objectURLsAreVirtualHostedForAWSAndPathStyleElsewhere() {
        let credentials = S3Credentials(accessKeyId: "AKID", secretAccessKey: "secret")
        let http = HTTPClient(timeout: 1)
        let aws = S3Client(
            bucket: "photos", region: "eu-west-1", endpoint: nil, pathStyle: nil, credentials: credentials, http: http)
        #expect(
            aws.url(key: "trip 1/a+b.jpg", query: [("uploads", "")]).absoluteString
                == "https://photos.s3.eu-west-1.amazonaws.com/trip%201/a%2Bb.jpg?uploads")
        #expect(
            aws.url(key: nil, query: [("list-type", "2"), ("prefix", "a/")]).absoluteString
                == "https://photos.s3.eu-west-1.amazonaws.com/?list-type=2&prefix=a%2F")
        let dotted = S3Client(
            bucket: "my.photos", region: "us-east-1", endpoint: nil, pathStyle: nil, credentials: credentials, http: http)
        #expect(dotted.url(key: "k.jpg").absoluteString == "https://s3.us-east-1.amazonaws.com/my.photos/k.jpg")
        let minio = S3Client(
            bucket: "photos", region: "us-east-1", endpoint: URL(string: "http://127.0.0.1:9000"), pathStyle: nil,
            credentials: credentials, http: http)
        #expect(minio.url(key: "k.jpg").absoluteString == "http://127.0.0.1:9000/photos/k.jpg")
    }
}
