import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The rules of devices and the offline push rule (docs/users.md#devices-and-the-offline-push-rule): push rules and
/// device registration, listing and removal.
///
/// A value made per request; it owns nothing mutable. Every write locks the owner's `users` row first (both
/// owners, in `user_id` order, when a push key moves), so the 20-device cap and key moves are race-free, and
/// writes its events last (docs/events.md#the-event-object). Transaction bodies are re-runnable: they compute what they
/// return from what they read.
struct DeviceService: DomainService {
    /// The request's connection (its worker thread's): reads run on it and transactions open on it.
    let db: PostgresConnection
    let appID: String
    /// Server-clock ms of the request.
    let now: Int64

    // MARK: - Push rule

    /// The user's rule (both lists empty when none was set).
    func pushRule(_ userID: String, on db: PostgresConnection) throws -> PushRule {
        try UserService.requireActive(userID, appID: appID, on: db)
        return try DeviceStore.pushRule(appID: appID, userID: userID, on: db) ?? .empty
    }

    /// Replaces the user's rule and writes `user.push_rule_updated` to the user.
    func setPushRule(_ userID: String, _ rule: PushRule) throws -> PushRule {
        try db.transaction { db in
            try UserService.requireActive(userID, appID: appID, forUpdate: true, on: db)
            try DeviceStore.savePushRule(appID: appID, userID: userID, rule: rule, now: now, on: db)
            var data = JSONObjectWriter(capacity: 160)
            data["user_id"] = userID
            data.raw("rule", rule.json())
            let event = NewEvent(type: "user.push_rule_updated", data: data.finish(), audience: [userID], orderKey: userID)
            try EventLog.append([event], appID: appID, now: now, on: db)
            return rule
        }
    }

    // MARK: - Devices

    /// The user's devices by `created_at`, then `device_id`.
    func list(_ userID: String, on db: PostgresConnection) throws -> [Device] {
        try UserService.requireActive(userID, appID: appID, on: db)
        return try DeviceStore.list(appID: appID, userID: userID, on: db)
    }

    /// The outcome of a registration.
    struct Registered: Sendable {
        var device: Device
        /// True for a new device (201), false when an existing one was updated (200).
        var created: Bool
    }

    /// Registers or updates a device (docs/users.md#devices-and-the-offline-push-rule): an existing device of this user
    /// with the same `device_id`, or the same provider + app_id + push_key, is updated; a key held by another user
    /// moves here (`device.removed` `moved` to the former owner); a 21st device evicts the least recently updated
    /// (`device.removed` `evicted`). Writes `device.registered`.
    package func register(_ userID: String, _ r: DeviceRegistration) throws -> Registered {
        // Two users registering one new key at once lock different user rows, so one of them meets the other's
        // row at the unique constraint: run it again, and it then sees (and locks) the key's holder.
        var attempt = 0
        while true {
            do {
                return try registerOnce(userID, r)
            } catch let error as PostgresError where error.sqlState == "23505" && attempt < 4 {
                attempt += 1
            }
        }
    }

    private func registerOnce(_ userID: String, _ r: DeviceRegistration) throws -> Registered {
        try db.transaction { db in
            var events: [NewEvent] = []
            let holder = try lockOwners(userID, r, on: db)
            // 404 of the user comes before the push-key format check (docs/errors.md#problems-rfc-9457: the resource
            // missing before the domain's own rules).
            if !Device.isValidPushKey(r.pushKey, provider: r.provider) {
                throw APIError(.pushKeyInvalid, "an APNs push key must be 64 to 200 hexadecimal characters")
            }
            let same = try r.deviceID.flatMap { try DeviceStore.fetch(appID: appID, userID: userID, deviceID: $0, on: db) }
            // The key's current holder, unless it is the very device being updated.
            if let holder, holder.userID != userID || holder.deviceID != same?.deviceID {
                if holder.userID != userID || same != nil {
                    // Another user's key moves here; or this user's key moves from one of its devices onto the device
                    // named by `device_id`.
                    _ = try DeviceStore.delete(appID: appID, userID: holder.userID, deviceID: holder.deviceID, on: db)
                    events.append(removed(holder.userID, holder.deviceID, reason: "moved"))
                } else {
                    // This user's device holding the key is updated (and takes the requested id, if any).
                    let device = updated(holder, r)
                    try DeviceStore.update(appID: appID, oldDeviceID: holder.deviceID, device: device, on: db)
                    events.append(registered(device))
                    try EventLog.append(events, appID: appID, now: now, on: db)
                    return Registered(device: device, created: false)
                }
            }
            if let same {
                let device = updated(same, r)
                try DeviceStore.update(appID: appID, oldDeviceID: same.deviceID, device: device, on: db)
                events.append(registered(device))
                try EventLog.append(events, appID: appID, now: now, on: db)
                return Registered(device: device, created: false)
            }
            let device = Device(
                deviceID: r.deviceID ?? IdentifierKind.generateSortableID(prefix: "d", timestampMs: now), userID: userID,
                platform: r.platform, provider: r.provider, pushKey: r.pushKey, pushAppID: r.pushAppID, voip: r.voip,
                apptype: r.apptype, lang: r.lang, createdAt: now, updatedAt: now, lastPushAt: nil)
            let existing = try DeviceStore.count(appID: appID, userID: userID, on: db)
            let evicted = try DeviceStore.evict(
                appID: appID, userID: userID, count: existing - (Device.maxPerUser - 1), on: db)
            events += evicted.map { removed(userID, $0, reason: "evicted") }
            try DeviceStore.insert(appID: appID, device: device, on: db)
            events.append(registered(device))
            try EventLog.append(events, appID: appID, now: now, on: db)
            return Registered(device: device, created: true)
        }
    }

    /// Removes one device of the user; 404 `not_found` when it has no such device.
    package func delete(_ userID: String, deviceID: String) throws {
        try db.transaction { db in
            try UserService.requireActive(userID, appID: appID, forUpdate: true, on: db)
            guard try DeviceStore.delete(appID: appID, userID: userID, deviceID: deviceID, on: db) else {
                throw APIError(.notFound, "user \(userID) has no device \(deviceID)")
            }
            try EventLog.append([removed(userID, deviceID, reason: "deleted")], appID: appID, now: now, on: db)
        }
    }

    // MARK: - Locks

    /// Locks the registering user and, when another user holds the key, that user too (in `user_id` order, so
    /// two opposite moves cannot deadlock). Returns the key's holder as read under those locks.
    private func lockOwners(_ userID: String, _ r: DeviceRegistration, on db: PostgresConnection) throws -> Device? {
        var holder = try DeviceStore.fetch(
            appID: appID, provider: r.provider, pushAppID: r.pushAppID, pushKey: r.pushKey, on: db)
        var locked: Set<String> = []
        // The holder can change between the unlocked read and the lock: lock again until it is covered.
        for _ in 0..<5 {
            let wanted = Set([userID] + (holder.map { [$0.userID] } ?? []))
            let toLock = wanted.subtracting(locked)
            if toLock.isEmpty { break }
            if locked.isEmpty {
                let users = try UserStore.fetchMany(appID: appID, userIDs: toLock.sorted(), forUpdate: true, on: db)
                guard let me = users.first(where: { $0.userID == userID }), !me.isDeleted else {
                    throw UserService.notFound(userID)
                }
            } else {
                // A late holder is locked out of order; the pool retries if that ever deadlocks.
                _ = try UserStore.fetchMany(appID: appID, userIDs: toLock.sorted(), forUpdate: true, on: db)
            }
            locked.formUnion(toLock)
            holder = try DeviceStore.fetch(
                appID: appID, provider: r.provider, pushAppID: r.pushAppID, pushKey: r.pushKey, on: db)
        }
        return holder
    }

    // MARK: - Helpers

    /// `device` with the registration's fields applied at `now`; `created_at` is kept.
    private func updated(_ device: Device, _ r: DeviceRegistration) -> Device {
        var d = device
        if let id = r.deviceID { d.deviceID = id }
        d.platform = r.platform
        d.provider = r.provider
        d.pushKey = r.pushKey
        d.pushAppID = r.pushAppID
        d.voip = r.voip
        d.apptype = r.apptype
        d.lang = r.lang
        d.updatedAt = now
        return d
    }

    private func registered(_ device: Device) -> NewEvent {
        var data = JSONObjectWriter()
        data.raw("device", device.json())
        return NewEvent(type: "device.registered", data: data.finish(), audience: [device.userID], orderKey: device.userID)
    }

    private func removed(_ userID: String, _ deviceID: String, reason: String) -> NewEvent {
        Device.removedEvent(userID: userID, deviceID: deviceID, reason: reason)
    }
}
