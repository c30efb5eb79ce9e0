import ParleyAPI
import ParleyCore
import ParleyPostgres

/// What the user routes need from domains above Users (groups, live streams), wired by the app layer
/// (App/Routes.swift) so that Users never names them: a user domain that calls into groups while groups call into
/// users is a cycle no module boundary could hold.
package struct UserHooks: Sendable {
    /// Removes a user being hard-deleted from every group and room it is in, inside the deleting transaction;
    /// returns the events to append before `user.deleted`.
    var removeFromGroups: RemoveFromGroups
    package typealias RemoveFromGroups = @Sendable (_ db: PostgresConnection, _ appID: String, _ userID: String, _ now: Int64) throws -> [NewEvent]
    /// How many of the user's streams are open now on `platforms` (on every node).
    package var openStreams: OpenStreams
    package typealias OpenStreams = @Sendable (_ db: PostgresConnection, _ appID: String, _ userID: String, _ platforms: [String]) throws -> Int

    package init(removeFromGroups: @escaping RemoveFromGroups, openStreams: @escaping OpenStreams) {
        self.removeFromGroups = removeFromGroups
        self.openStreams = openStreams
    }
}
