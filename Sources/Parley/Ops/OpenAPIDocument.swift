/// The OpenAPI document served at `/openapi.json`, read once from `openapi/openapi.json` (`PARLEY_OPENAPI_PATH`
/// overrides where; otherwise found like the other repository files, `RepositoryFile`).
enum OpenAPIDocument {
    static let bytes: [UInt8]? = RepositoryFile.read(
        "openapi/openapi.json", overridePath: RepositoryFile.environment("PARLEY_OPENAPI_PATH"))
}
