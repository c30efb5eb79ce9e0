import Glibc
import ParleyCore
import ParleyTesting
import Testing

@testable import Parley

/// `parley config`, `parley config check` and the generated docs/configuration.md, run in-process (no server).
@Suite("parley config")
struct ConfigCommandTests {
    /// The listing's line for `variable`, split into its columns: variable, source, value.
    static func line(_ output: String, _ variable: String, sourceLocation: SourceLocation = #_sourceLocation) -> (source: String, value: String)? {
        for line in output.split(separator: "\n") {
            var rest = Substring(line)
            func column() -> String {
                let word = rest.prefix { $0 != " " }
                rest = rest.dropFirst(word.count).drop { $0 == " " }
                return String(word)
            }
            guard column() == variable else { continue }
            let source = column()
            return (source, String(rest))
        }
        Issue.record("no line for \(variable) in:\n\(output)", sourceLocation: sourceLocation)
        return nil
    }

    static func temporaryDirectory() -> String {
        var template = Array("/tmp/parley-config-test-XXXXXX".utf8CString)
        return String(cString: mkdtemp(&template))
    }

    static func fingerprint(_ secret: String) -> String { "sha256 " + Crypto.hex(Crypto.sha256(secret)).prefix(8) }

    @Test func eachValueShowsWhereItCameFrom() throws {
        let data = Self.temporaryDirectory()
        let savedKey = "sk_saved-key-0123456789abcdef"
        let fd = open(data + "/admin_key", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        _ = write(fd, savedKey + "\n", savedKey.utf8.count + 1)
        close(fd)
        let outcome = ConfigCommand.run(
            arguments: ["--db-pool-size", "7", "--log-level=debug"],
            environment: ["PARLEY_LISTEN": "0.0.0.0:9000", "PARLEY_LOG_LEVEL": "error", "PARLEY_DATA_DIR": data, "PARLEY_TEST_CLOCK": ""])
        #expect(outcome.status == 0, "\(outcome.errors)")
        let output = outcome.output
        #expect(Self.line(output, "PARLEY_LISTEN")! == ("environment", "0.0.0.0:9000"))
        #expect(Self.line(output, "PARLEY_DB_POOL_SIZE")! == ("flag", "7"))
        // A flag beats the variable.
        #expect(Self.line(output, "PARLEY_LOG_LEVEL")! == ("flag", "debug"))
        // An empty variable is unset.
        #expect(Self.line(output, "PARLEY_TEST_CLOCK")! == ("default", "0"))
        #expect(Self.line(output, "PARLEY_SSE_HEARTBEAT_MS")! == ("default", "15000"))
        #expect(Self.line(output, "PARLEY_DATA_DIR")! == ("environment", data))
        #expect(Self.line(output, "PARLEY_ADMIN_KEY")! == ("file", "****** (\(Self.fingerprint(savedKey))) from \(data)/admin_key"))
        #expect(!output.contains(savedKey))
        // One line per setting of the table, in its order.
        #expect(output.split(separator: "\n").map { String($0.prefix { $0 != " " }) } == Configuration.settings.map(\.variable))
    }

    @Test func withoutAKeySavedTheListingSaysItWillBeGenerated() {
        let data = Self.temporaryDirectory()
        let outcome = ConfigCommand.run(arguments: ["--data-dir", data], environment: [:])
        #expect(Self.line(outcome.output, "PARLEY_ADMIN_KEY")! == ("default", "unset: generated at the first start into \(data)/admin_key"))
        // `parley config` only reads: it must not write the key `serve` would generate.
        #expect(access(data + "/admin_key", F_OK) != 0)
    }

    @Test func secretsAreMasked() {
        let environment = [
            "PARLEY_ADMIN_KEY": "admin-key-current-0123456789", "PARLEY_ADMIN_KEY_SECONDARY": "admin-key-previous-0123456789",
            "PARLEY_METRICS_TOKEN": "metrics-token-secret", "DATABASE_URL": "postgres://parley:db-password-secret@db.internal:5432/parley",
            "PARLEY_FILES_BACKEND": "s3", "PARLEY_FILES_S3_ENDPOINT": "http://127.0.0.1:9000", "PARLEY_FILES_S3_BUCKET": "parley-files",
            "PARLEY_FILES_S3_ACCESS_KEY_ID": "AKIDEXAMPLE", "PARLEY_FILES_S3_SECRET_ACCESS_KEY": "s3-secret-access-key",
        ]
        let outcome = ConfigCommand.run(arguments: [], environment: environment)
        #expect(outcome.status == 0, "\(outcome.errors)")
        for secret in ["admin-key-current", "admin-key-previous", "metrics-token-secret", "db-password-secret", "s3-secret-access-key"] {
            #expect(!outcome.output.contains(secret), "\(secret) printed")
        }
        for variable in ["PARLEY_ADMIN_KEY", "PARLEY_ADMIN_KEY_SECONDARY", "PARLEY_METRICS_TOKEN", "PARLEY_FILES_S3_SECRET_ACCESS_KEY"] {
            let value = environment[variable]!
            #expect(Self.line(outcome.output, variable)! == ("environment", "****** (\(Self.fingerprint(value)))"))
        }
        #expect(Self.line(outcome.output, "DATABASE_URL")! == ("environment", "postgres://parley:****@db.internal:5432/parley"))
        #expect(Self.line(outcome.output, "PARLEY_FILES_S3_ACCESS_KEY_ID")! == ("environment", "AKIDEXAMPLE"))
    }

    @Test func passwordsInDatabaseURLsAreReplaced() {
        let cases = [
            "postgres://u:p%40ss@h:5432/db": "postgres://u:****@h:5432/db",
            "postgresql://u@h/db?password=secret&sslmode=require": "postgresql://u@h/db?password=****&sslmode=require",
            "host=/run/pg user=parley password=secret dbname=parley": "host=/run/pg user=parley password=**** dbname=parley",
            "host=db password = 'two words' dbname=parley": "host=db password=**** dbname=parley",
            "postgres://u@h/db": "postgres://u@h/db",
        ]
        for (url, shown) in cases { #expect(ConfigCommand.withoutPassword(url) == shown, "\(url)") }
    }

    @Test func checkExitsZeroForAValidConfiguration() {
        let outcome = ConfigCommand.run(arguments: ["check", "--listen", "127.0.0.1:0"], environment: ["PARLEY_DB_POOL_SIZE": "8"])
        #expect(outcome == ConfigCommand.Outcome(status: 0, output: "parley: the configuration is valid\n"))
    }

    @Test func checkListsEveryProblemAndExitsTwo() {
        let environment = [
            "PARLEY_LISTEN": "nowhere", "PARLEY_DB_POOL_SIZE": "0", "PARLEY_ADMIN_KEY": "short secret",
            "PARLEY_FILES_BACKEND": "s3", "DATABASE_URL": "nonsense=1",
        ]
        let outcome = ConfigCommand.run(arguments: ["check", "--sse-heartbeat-ms", "5", "--no-such-flag"], environment: environment)
        #expect(outcome.status == 2)
        #expect(outcome.output.isEmpty)
        let lines = outcome.errors.split(separator: "\n").map(String.init)
        for expected in [
            #"parley: PARLEY_LISTEN (--listen) must be host:port with a port from 0 to 65535, got "nowhere""#,
            #"parley: PARLEY_DB_POOL_SIZE (--db-pool-size) must be an integer from 1 to 512, got "0""#,
            #"parley: PARLEY_SSE_HEARTBEAT_MS (--sse-heartbeat-ms) must be an integer from 100 to 15000, got "5""#,
            "parley: PARLEY_ADMIN_KEY (--admin-key) must be at least 16 printable ASCII characters without spaces",
            "parley: unknown option --no-such-flag (see parley serve --help)",
        ] {
            #expect(lines.contains(expected), "missing: \(expected)\nin:\n\(outcome.errors)")
        }
        for variable in ["PARLEY_FILES_S3_ENDPOINT", "PARLEY_FILES_S3_BUCKET", "PARLEY_FILES_S3_ACCESS_KEY_ID", "PARLEY_FILES_S3_SECRET_ACCESS_KEY"] {
            #expect(lines.contains { $0.hasPrefix("parley: \(variable) ") && $0.contains("required") }, "\(variable)")
        }
        #expect(lines.contains { $0.hasPrefix("parley: DATABASE_URL (--database-url) is not a PostgreSQL URL") })
        #expect(lines.count == 10, "\(outcome.errors)")
        // The admin key's bad value is not repeated.
        #expect(!outcome.errors.contains("short secret"))
        // `serve` refuses the same configuration with the same exit status, before it touches anything.
        #expect(ParleyCommand.run(command: "serve", arguments: ["--sse-heartbeat-ms", "5"], environment: environment) == 2)
    }

    @Test func theSecondaryAdminKeyIsValidatedLikeTheKey() {
        let key = "admin-key-0123456789"
        for (secondary, problem) in [
            (
                "short",
                "PARLEY_ADMIN_KEY_SECONDARY (--admin-key-secondary) must be at least 16 printable ASCII characters without spaces, other than PARLEY_ADMIN_KEY"
            ),
            (key, "PARLEY_ADMIN_KEY_SECONDARY (--admin-key-secondary) must differ from PARLEY_ADMIN_KEY"),
        ] {
            do {
                _ = try Configuration.load(environment: ["PARLEY_ADMIN_KEY": key, "PARLEY_ADMIN_KEY_SECONDARY": secondary], arguments: [])
                Issue.record("PARLEY_ADMIN_KEY_SECONDARY=\(secondary) was accepted")
            } catch {
                #expect(error.problems == [problem])
            }
        }
        let loaded = try? Configuration.load(environment: ["PARLEY_ADMIN_KEY": key], arguments: ["--admin-key-secondary", "previous-key-0123456789"])
        #expect(loaded?.secondaryAdminKey == "previous-key-0123456789")
        #expect(loaded?.sources["PARLEY_ADMIN_KEY_SECONDARY"] == .flag)
    }

    @Test func helpListsEveryFlag() {
        for setting in Configuration.settings {
            #expect(Configuration.helpText.contains(setting.flag ?? setting.variable), "\(setting.variable)")
        }
    }

    /// docs/configuration.md is `parley config --markdown`: the settings table is the one source of the reference.
    @Test func theConfigurationReferenceIsUpToDate() throws {
        let root = #filePath.split(separator: "/").dropLast(3).joined(separator: "/")
        let committed = DataDirectory.readFile("/" + root + "/docs/configuration.md")
        #expect(
            committed == ConfigurationReference.markdown,
            "docs/configuration.md is out of date: run `swift run parley config --markdown > docs/configuration.md`")
        #expect(ConfigCommand.run(arguments: ["--markdown"], environment: [:]).output == ConfigurationReference.markdown)
    }
}
