import Testing

@testable import ParleyHTTP

@Suite("Percent decoding")
struct PercentTests {
    @Test func pathSegments() {
        #expect(PercentDecoding.decode("u1") == "u1")
        #expect(PercentDecoding.decode("%23general") == "#general")
        #expect(PercentDecoding.decode("a%2Fb%3f%25") == "a/b?%")
        #expect(PercentDecoding.decode("a+b") == "a+b")
        #expect(PercentDecoding.decode("%C3%A9%e4%b8%ad") == "é中")
        #expect(PercentDecoding.decode("") == "")
        #expect(PercentDecoding.decode("%00") == "\u{0}")
    }

    @Test(arguments: ["%", "%2", "a%", "%G0", "%0G", "%%", "%C3", "%FF", "%C0%AF", "%ED%A0%80", "%E4%B8"])
    func malformedEscapes(_ s: String) {
        #expect(PercentDecoding.decode(s[...]) == nil)
        #expect(PercentDecoding.decodeQuery(s[...]) == nil)
    }

    @Test func queryComponents() {
        #expect(PercentDecoding.decodeQuery("a+b%2Bc") == "a b+c")
        #expect(PercentDecoding.decodeQuery("%20") == " ")
    }

    @Test func queryStrings() throws {
        let q = try #require(PercentDecoding.parseQuery(Substring("limit=20&cursor=abc.def&q=hello+world&types=1%2C11&flag&&x=&q=2")))
        #expect(q.map(\.0) == ["limit", "cursor", "q", "types", "flag", "x", "q"])
        #expect(q.map(\.1) == ["20", "abc.def", "hello world", "1,11", "", "", "2"])
        #expect(PercentDecoding.parseQuery(Substring(""))?.isEmpty == true)
        #expect(PercentDecoding.parseQuery(Substring("a=b=c"))?.first?.1 == "b=c")
        #expect(PercentDecoding.parseQuery(Substring("a=%zz")) == nil)
        #expect(PercentDecoding.parseQuery(Substring("%E9=1")) == nil)
        let target = "/v1/users?state=all&limit=5"
        let sub = target[target.index(after: target.firstIndex(of: "?")!)...]
        #expect(PercentDecoding.parseQuery(sub)?.count == 2)
    }
}
