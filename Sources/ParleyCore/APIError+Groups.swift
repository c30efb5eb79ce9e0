/// The group errors that more than the group domain answers with (group messages and history answer them too).
extension APIError {
    /// 404 `group_not_found`.
    package static func groupNotFound(_ groupID: String) -> APIError { APIError(.groupNotFound, "group \(groupID) does not exist") }

    /// 409 `group_dismissed`.
    package static func groupDismissed(_ groupID: String) -> APIError { APIError(.groupDismissed, "group \(groupID) is dismissed") }

    /// 403 `not_group_member`.
    package static func notGroupMember(_ userID: String, _ groupID: String) -> APIError {
        APIError(.notGroupMember, "user \(userID) is not a member of group \(groupID)")
    }
}
