import Testing

@testable import ParleyCore
@testable import ParleyDomains

/// The `s3` file storage backend's pieces that need no object store: AWS Signature Version 4 against the example
/// values AWS publishes for S3 (the secret `wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY`, 24 May 2013, us-east-1), the
/// XML it reads and writes, and the settings. The whole backend against a store runs in scripts/s3-check.sh (moto).
@Suite("Files S3 storage")
struct FileStorageS3Tests {
    static let signature = S3Signature(
        accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", region: "us-east-1")
    static let timestamp = "20130524T000000Z"

    @Test func aRangedGetSignsAsAWSPublished() {
        let authorization = Self.signature.authorization(
            method: "GET", path: "/test.txt", query: [],
            headers: [
                ("Host", "examplebucket.s3.amazonaws.com"), ("Range", "bytes=0-9"), ("x-amz-content-sha256", S3Signature.emptyPayloadHash),
                ("x-amz-date", Self.timestamp),
            ], payloadHash: S3Signature.emptyPayloadHash, timestamp: Self.timestamp)
        #expect(
            authorization
                == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
                + "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
                + "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    @Test func aPutWithAPayloadAndAnEncodedKeySignsAsAWSPublished() {
        let payloadHash = Crypto.hex(Crypto.sha256("Welcome to Amazon S3."))
        #expect(payloadHash == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        let authorization = Self.signature.authorization(
            method: "PUT", path: "/" + S3Signature.uriEncode("test$file.text", encodeSlash: false), query: [],
            headers: [
                ("Host", "examplebucket.s3.amazonaws.com"), ("Date", "Fri, 24 May 2013 00:00:00 GMT"),
                ("x-amz-content-sha256", payloadHash), ("x-amz-date", Self.timestamp), ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ], payloadHash: payloadHash, timestamp: Self.timestamp)
        #expect(
            authorization.hasSuffix(
                "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,"
                    + "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"))
    }

    @Test func aQueryIsSortedAndEncodedAsAWSPublished() {
        let authorization = Self.signature.authorization(
            method: "GET", path: "/", query: [("prefix", "J"), ("max-keys", "2")],
            headers: [
                ("Host", "examplebucket.s3.amazonaws.com"), ("x-amz-content-sha256", S3Signature.emptyPayloadHash), ("x-amz-date", Self.timestamp),
            ], payloadHash: S3Signature.emptyPayloadHash, timestamp: Self.timestamp)
        #expect(authorization.hasSuffix("Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"))
        // A parameter without a value (`?lifecycle`, `?uploads`) is signed as `name=`.
        let lifecycle = Self.signature.authorization(
            method: "GET", path: "/", query: [("lifecycle", "")],
            headers: [
                ("Host", "examplebucket.s3.amazonaws.com"), ("x-amz-content-sha256", S3Signature.emptyPayloadHash), ("x-amz-date", Self.timestamp),
            ], payloadHash: S3Signature.emptyPayloadHash, timestamp: Self.timestamp)
        #expect(lifecycle.hasSuffix("Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"))
    }

    @Test func pathsAreEncodedOnceWithTheirSlashesKept() {
        #expect(S3Signature.uriEncode("app_1/b_x y~z", encodeSlash: false) == "app_1/b_x%20y~z")
        #expect(S3Signature.uriEncode("a/b+c=é", encodeSlash: true) == "a%2Fb%2Bc%3D%C3%A9")
        #expect(S3Signature.timestamp(seconds: 1_369_353_600) == "20130524T000000Z")
    }

    @Test func theXMLItReadsAndWrites() {
        let created = Array(
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>b</Bucket><Key>k</Key>\
            <UploadId>VXBsb2FkIElE&amp;x</UploadId></InitiateMultipartUploadResult>
            """.utf8)
        #expect(S3XML.value(of: "UploadId", in: created) == "VXBsb2FkIElE&x")
        let failed = Array("<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>".utf8)
        #expect(S3XML.value(of: "Code", in: failed) == "NoSuchBucket")
        #expect(S3XML.value(of: "Message", in: failed) == "The specified bucket does not exist")
        #expect(S3XML.value(of: "UploadId", in: failed) == nil)
        #expect(S3XML.escaped("\"3858f62230ac3c915f300c664312c11f-9\"") == "&quot;3858f62230ac3c915f300c664312c11f-9&quot;")
    }

    @Test func theSettingsAndTheirDefaults() throws {
        #expect(try Configuration.load(environment: [:], arguments: []).fileStorage == FileStorageSettings())
        let environment = [
            "PARLEY_FILES_BACKEND": "s3", "PARLEY_FILES_S3_ENDPOINT": "http://127.0.0.1:9000/", "PARLEY_FILES_S3_BUCKET": "parley-files",
            "PARLEY_FILES_S3_ACCESS_KEY_ID": "id", "PARLEY_FILES_S3_SECRET_ACCESS_KEY": "secret",
        ]
        let storage = try Configuration.load(environment: environment, arguments: []).fileStorage
        #expect(storage.backend == .s3)
        #expect(
            storage.s3
                == S3Settings(
                    endpoint: "http://127.0.0.1:9000", bucket: "parley-files", region: "us-east-1", accessKeyID: "id", secretAccessKey: "secret",
                    pathStyle: true))
        #expect(!S3Settings.defaultPathStyle(endpoint: "https://s3.eu-west-1.amazonaws.com"))
        #expect(S3Settings.defaultPathStyle(endpoint: "http://localhost:9000"))
        #expect(S3Settings.defaultPathStyle(endpoint: "http://[::1]:9000"))
        var virtual = environment
        virtual["PARLEY_FILES_S3_PATH_STYLE"] = "0"
        #expect(try Configuration.load(environment: virtual, arguments: []).fileStorage.s3?.pathStyle == false)
        var missing = environment
        missing["PARLEY_FILES_S3_BUCKET"] = nil
        #expect(throws: Configuration.Invalid.self) { try Configuration.load(environment: missing, arguments: []) }
        #expect(throws: Configuration.Invalid.self) { try Configuration.load(environment: ["PARLEY_FILES_BACKEND": "disk"], arguments: []) }
    }

    @Test func virtualHostedRequestsGoToTheBucketsHost() {
        let client = S3Client(
            settings: S3Settings(
                endpoint: "https://s3.eu-west-1.amazonaws.com", bucket: "parley-files", region: "eu-west-1", accessKeyID: "id",
                secretAccessKey: "secret", pathStyle: false))
        #expect(client.origin == "https://parley-files.s3.eu-west-1.amazonaws.com")
        #expect(client.host == "parley-files.s3.eu-west-1.amazonaws.com")
        #expect(client.path(key: "a/b") == "/a/b")
    }
}
