import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyHTTP
import ParleyLive
import ParleyPostgres

/// The route table of the server: every route Parley serves, registered in one place.
enum Routes {
    /// Builds the frozen router over `services`, the node's live hub, its message writer, its push bridge and its
    /// database health.
    static func build(
        services: Services, hub: EventHub, writer: MessageWriter, push: PushBridge, health: DatabaseHealth, jobs: JobRunner
    ) -> Router {
        var builder = RouterBuilder()
        OpsRoutes(services: services, push: push, health: health).register(on: &builder)
        ConsoleRoutes.register(on: &builder)
        var api = API(services: services, builder: builder)
        AppRoutes.register(on: &api)
        // The node's compiled blocklists; a hit goes to the moderation domain above (reports, escalation).
        let blocklists = BlocklistCache(
            hooks: ReportHooks.blocklistHooks(services: services),
            metrics: services.metrics)
        BlocklistRoutes.register(on: &api, cache: blocklists)
        // Users is below Groups, Rooms, Calls and Live: what its routes need from them is handed in here.
        let userHooks = UserHooks(
            removeFromGroups: removeDeletedUser,
            openStreams: { db, appID, userID, platforms in
                try StreamPresence.count(appID: appID, userID: userID, platforms: platforms, on: db)
            })
        UserRoutes.register(on: &api, hooks: userHooks, blocklists: blocklists)
        PresenceRoutes.register(on: &api)
        BlacklistRoutes.register(on: &api)
        FriendRoutes.register(on: &api)
        GroupRoutes.register(on: &api, blocklists: blocklists)
        RoomRoutes.register(on: &api)
        DeviceRoutes.register(on: &api)
        // Files sit below Messages: whether a user reads a message naming a file is handed in here.
        FileRoutes.register(on: &api) { db, appID, fileID, userID, now in
            try MessageFiles.readable(fileID: fileID, byUser: userID, appID: appID, now: now, on: db)
        }
        MessageRoutes.register(on: &api, writer: writer, blocklists: blocklists)
        RetentionRoutes.register(on: &api)
        // Messages sit below Push: a revoke's push is handed in here.
        MessageLifecycleRoutes.register(on: &api, pool: services.pool, blocklists: blocklists) { db, appID, messageID, push, now in
            try PushPlanner.revokePush(appID: appID, messageID: messageID, push: push, now: now, on: db)
        }
        MessageReactionRoutes.register(on: &api, pool: services.pool)
        MessagePinRoutes.register(on: &api)
        MessageReceiptRoutes.register(on: &api)
        MessageSearchRoutes.register(on: &api)
        if let importer = jobs.kind(MessageImportJob.kindName), let exporter = jobs.kind(MessageExportJob.kindName) {
            MessageImportRoutes.register(on: &api, job: importer) { jobs.poke() }
            MessageExportRoutes.register(on: &api, job: exporter) { jobs.poke() }
        }
        ConversationRoutes.register(on: &api)
        ConversationSignalRoutes.register(on: &api)
        PushRoutes.register(on: &api, bridge: push)
        CallRoutes.register(on: &api)
        WebhookRoutes.register(on: &api)
        ReportRoutes.register(on: &api)
        EventRoutes.register(on: &api)
        LiveRoutes.register(on: &api, hub: hub)
        JobRoutes.register(on: &api)
        if let removal = jobs.kind(MessageBulkRemoval.kindName) {
            MessageBulkRemovalRoutes.register(on: &api, kind: removal) { jobs.poke() }
        }
        if let export = jobs.kind(UserExport.kindName) {
            UserExportRoutes.register(on: &api, kind: export) { jobs.poke() }
        }
        if let erasure = jobs.kind(UserErasure.kindName) {
            UserErasureRoutes.register(on: &api, kind: erasure) { jobs.poke() }
        }
        OpsAPIRoutes.register(on: &api, hub: hub, push: push, health: health, jobs: jobs)
        return api.builder.build()
    }

    /// Every job kind of the server (docs/jobs.md#adding-a-job-kind), handed to the node's ``JobRunner``; a domain with
    /// a job adds its kind here, with what it needs from above wired in.
    static func jobKinds(services: Services) -> [JobKind] {
        [
            // Messages sit below Push: a delete for everyone's revoke push is handed in here.
            MessageBulkRemoval.kind(services: services) { db, appID, messageID, push, now in
                try PushPlanner.revokePush(appID: appID, messageID: messageID, push: push, now: now, on: db)
            },
            MessageExportJob.kind(),
            MessageImportJob.kind(services: services),
            UserExport.kind(services: services),
            UserErasure.kind(
                services: services,
                revokePush: { db, appID, messageID, push, now in
                    try PushPlanner.revokePush(appID: appID, messageID: messageID, push: push, now: now, on: db)
                }, removeFromGroups: removeDeletedUser),
        ]
    }

    /// A hard-deleted user leaves its groups, rooms and calls (Users sits below them; ``UserHooks``).
    static let removeDeletedUser: UserHooks.RemoveFromGroups = { db, appID, userID, now in
        try GroupService(db: db, appID: appID, now: now).removeDeletedUser(userID, on: db)
            + RoomService(db: db, appID: appID, now: now).removeDeletedUser(userID, on: db)
            + CallService(db: db, appID: appID, now: now).removeDeletedUser(userID, on: db)
    }
}

/// One served route as the OpenAPI contract check sees it.
public struct RouteInfo: Sendable, Hashable {
    public let method: String
    public let template: String
    public let operationID: String?
}

extension ParleyApp {
    /// Every route of this server (method, path template, operationId).
    public var routeTable: [RouteInfo] {
        server.router.routes.map { RouteInfo(method: $0.method.rawValue, template: $0.template, operationID: $0.options.operationID) }
    }
}
