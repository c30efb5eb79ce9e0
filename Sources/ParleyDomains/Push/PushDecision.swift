import ParleyCore

/// What the bridge knows of one recipient when it decides (docs/push.md#what-is-pushed-to-whom): its devices, its
/// conversation's notification status, the platforms it has open user streams on, its offline push rule and its unread
/// total.
struct PushRecipient: Sendable {
    var userID: String
    var devices: [Device]
    /// The recipient set the item's conversation to `do_not_disturb`.
    var doNotDisturb = false
    /// Platforms with an open user stream of the recipient, on any node.
    var onlinePlatforms: Set<String> = []
    var rule: PushRule?
    /// The recipient's total unread count just after the commit (only read when the item asks for a badge).
    var unread: Int64?
}

/// The push decision for one recipient (docs/push.md#what-is-pushed-to-whom): every device with the reason that removed
/// it (nil: selected), and the attempt it comes to.
struct PushDecision: Sendable {
    /// The reasons a device is removed, in the order the steps of the decision apply.
    enum Reason: String, Sendable {
        case notConfigured = "not_configured"
        case dnd, kind, online
        case pushRule = "push_rule"
    }

    var devices: [(device: Device, reason: Reason?)]

    /// The selected devices (the gateway request's candidates).
    var candidates: [Device] { devices.filter { $0.reason == nil }.map(\.device) }

    /// `suppressed` with this reason when no device is selected: the last filter that removed one.
    var suppression: Reason? {
        guard candidates.isEmpty else { return nil }
        let order: [Reason] = [.notConfigured, .dnd, .kind, .online, .pushRule]
        return devices.compactMap(\.reason).max { order.firstIndex(of: $0)! < order.firstIndex(of: $1)! }
    }

    /// Decides for `recipient` (steps 1–3 of docs/push.md#what-is-pushed-to-whom). `filters`: false for revoke pushes,
    /// which apply step 1 only.
    init(kind: PushItem.Kind, configured: Bool, recipient: PushRecipient, filters: Bool = true) {
        let all = recipient.devices
        if !configured {
            devices = all.map { ($0, .notConfigured) }
            return
        }
        if !filters {
            devices = all.map { ($0, nil) }
            return
        }
        if kind.respectsDoNotDisturb && recipient.doNotDisturb {
            devices = all.map { ($0, .dnd) }
            return
        }
        // Step 3: the kind, then open streams, then the offline push rule.
        let takesKind: (Device) -> Bool
        if kind.isCall {
            let hasVoIP = all.contains { $0.voip }
            takesKind = { $0.voip == hasVoIP }
        } else {
            takesKind = { !$0.voip }
        }
        let online = recipient.onlinePlatforms
        let ruleMutes: Set<String> = {
            guard let rule = recipient.rule, rule.onlinePlatforms.contains(where: { online.contains($0.rawValue) }) else { return [] }
            return Set(rule.mutedPlatforms.map(\.rawValue))
        }()
        devices = all.map { device in
            if !takesKind(device) { return (device, .kind) }
            if online.contains(device.platform.rawValue) { return (device, .online) }
            if ruleMutes.contains(device.platform.rawValue) { return (device, .pushRule) }
            return (device, nil)
        }
    }
}
