import Glibc
import Parley

/// `parley serve | migrate | version | help`: parses the command line and hands over to the Parley module.
let arguments = Array(CommandLine.arguments.dropFirst())
let command = arguments.first ?? "help"
let rest = Array(arguments.dropFirst())
var environment: [String: String] = [:]
var envp = environ
while let entry = envp.pointee {
    let text = String(cString: entry)
    if let eq = text.firstIndex(of: "=") { environment[String(text[..<eq])] = String(text[text.index(after: eq)...]) }
    envp += 1
}
exit(ParleyCommand.run(command: command, arguments: rest, environment: environment))
