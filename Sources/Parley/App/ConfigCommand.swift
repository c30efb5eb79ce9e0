import ParleyCore
import ParleyPostgres

/// `parley config`: the effective configuration, each value with where it came from, secrets masked;
/// `parley config check`: the validation `parley serve` runs before it touches the database; `parley config --markdown`:
/// docs/configuration.md. All three read ``Configuration/settings``, the table `serve` loads.
enum ConfigCommand {
    static let usage = """
        usage: parley config [serve options]         print the effective configuration, each value with its source
               parley config check [serve options]   validate it as parley serve does: exit 0, or 2 listing every problem
               parley config --markdown              print docs/configuration.md (the reference of every setting)

        """

    /// What the command printed and its exit status, so tests can run it in-process.
    struct Outcome: Equatable {
        var status: Int32
        var output = ""
        var errors = ""
    }

    static func run(arguments: [String], environment: [String: String]) -> Outcome {
        if arguments.contains("--help") || arguments.contains("-h") { return Outcome(status: 0, output: usage) }
        if arguments == ["--markdown"] { return Outcome(status: 0, output: ConfigurationReference.markdown) }
        let checking = arguments.first == "check"
        let options = checking ? Array(arguments.dropFirst()) : arguments
        let configuration: Configuration
        do {
            configuration = try validated(environment: environment, arguments: options)
        } catch {
            return Outcome(status: 2, errors: error.problems.map { "parley: \($0)\n" }.joined())
        }
        if checking { return Outcome(status: 0, output: "parley: the configuration is valid\n") }
        return Outcome(status: 0, output: listing(configuration))
    }

    /// The configuration `parley serve` would start with, or every problem that would stop it before it reaches the
    /// database: ``Configuration/load(environment:arguments:)``, then the parse of `DATABASE_URL` that opening the
    /// database begins with.
    static func validated(environment: [String: String], arguments: [String]) throws(Configuration.Invalid) -> Configuration {
        var problems: [String] = []
        var configuration = Configuration()
        do {
            configuration = try Configuration.load(environment: environment, arguments: arguments)
        } catch {
            problems = error.problems
        }
        let url = configuration.databaseURL ?? (problems.isEmpty ? nil : environment["DATABASE_URL"])
        if let url, !url.isEmpty {
            do {
                _ = try PostgresConfiguration(url)
            } catch {
                problems.append("DATABASE_URL (--database-url) is not a PostgreSQL URL or conninfo: \(error.message)")
            }
        }
        guard problems.isEmpty else { throw Configuration.Invalid(problems) }
        return configuration
    }

    /// One line per setting: variable, source (`default`, `environment`, `flag`, `file`), value.
    static func listing(_ configuration: Configuration) -> String {
        var text = ""
        for setting in Configuration.settings {
            var source = "default"
            var value = setting.defaultText
            if let effective = setting.effective(configuration) {
                value = masked(effective, setting.masking)
                source = configuration.sources[setting.variable].map(name) ?? "default"
            }
            if setting.variable == "PARLEY_ADMIN_KEY" && configuration.adminKey == nil {
                // The key `serve` falls back on, read (never written) here.
                let path = DataDirectory.adminKeyPath(in: configuration.dataDirectory)
                if let saved = DataDirectory.savedAdminKey(in: configuration.dataDirectory) {
                    (source, value) = ("file", masked(saved, .secret) + " from " + path)
                } else {
                    value = "unset: generated at the first start into " + path
                }
            }
            text += setting.variable.padded(to: 36) + source.padded(to: 13) + value + "\n"
        }
        return text
    }

    private static func name(_ source: Configuration.Source) -> String {
        switch source {
        case .environment: "environment"
        case .flag: "flag"
        }
    }

    /// `value` as `parley config` may print it: a secret as a fingerprint (the first 8 hex digits of its SHA-256, enough
    /// to tell whether two nodes have the same key), a database URL without its password.
    static func masked(_ value: String, _ masking: Configuration.Masking) -> String {
        switch masking {
        case .none: value
        case .secret: "****** (sha256 \(Crypto.hex(Crypto.sha256(value)).prefix(8)))"
        case .password: withoutPassword(value)
        }
    }

    /// A PostgreSQL URL (`postgres://user:password@host/db?password=…`) or conninfo (`password=…`) with each password
    /// replaced by `****`.
    static func withoutPassword(_ text: String) -> String {
        var out = text
        if let scheme = out.firstRange(of: "://") {
            let rest = out[scheme.upperBound...]
            let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
            if let at = rest[..<authorityEnd].lastIndex(of: "@"), let colon = rest[..<at].firstIndex(of: ":") {
                out.replaceSubrange(out.index(after: colon)..<at, with: "****")
            }
        }
        return out.replacing(/password\s*=\s*('[^']*'|[^&\s]*)/, with: "password=****")
    }
}

extension String {
    fileprivate func padded(to width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}
