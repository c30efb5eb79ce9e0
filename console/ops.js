// Parley console, operations screens: rooms, calls, webhooks, push, the event log, files, moderation, blocklists,
// retention and jobs. Built on the shared helpers of console.js (h, api, form, field, table, registerScreen, …); every
// call goes to the public API of the same origin with the signed-in credential.
"use strict";

// One function scope: the console's scripts share the page's global names, and nothing here needs to be global.
(() => {
  const PAGE = 20;

  // MARK: - Small helpers shared by the screens below


  /** A button whose accessible name says which row it acts on ("Destroy" alone is ambiguous in a table). */
  function rowButton(text, name, onclick, className) {
    const element = button(text, onclick, className);
    element.setAttribute("aria-label", name);
    return element;
  }

  /** Tables scroll inside their own box so a narrow screen never scrolls the page sideways. */
  function wideTable(columns, rows, actions, caption) {
    const element = table(columns, rows, actions);
    if (caption) element.prepend(h("caption", { class: "visually-hidden" }, caption));
    return h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption || "Table" }, element);
  }

  const code = (value) => (value === null || value === undefined || value === "" ? "" : h("code", {}, String(value)));
  const yesNo = (value) => (value ? "yes" : "no");
  const time = (value) => (value ? formatTime(value) : "");
  const list = (value) => (Array.isArray(value) ? value.join(", ") : value ?? "");
  const splitList = (text) => String(text || "").split(/[,\n]/).map((s) => s.trim()).filter(Boolean);

  /** An object as a definition list; nested values as JSON, so nothing the API answers is hidden. */
  function describe(object, formats = {}) {
    return h("dl", { class: "kv" }, Object.entries(object || {}).flatMap(([key, value]) => [
      h("dt", {}, key.replaceAll("_", " ")),
      h("dd", {}, formats[key] ? formats[key](value, object)
        : value !== null && typeof value === "object" ? json(value)
          : key.endsWith("_at") || key === "at" ? time(value)
            : value === null ? h("span", { class: "muted" }, "none") : String(value)),
    ]));
  }

  function json(value) {
    return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
  }

  /** A labelled checkbox (field() makes text inputs; FormData leaves unchecked boxes out, so read `.checked`). */
  function checkbox(id, label, checked, attributes = {}) {
    return h("label", { for: id, class: "check" }, h("input", { id, name: id, type: "checkbox", checked, ...attributes }), label);
  }

  function textarea(id, label, value, attributes = {}) {
    const element = h("textarea", { id, name: id, rows: 4, ...attributes });
    element.value = value || "";
    return h("label", { for: id }, label, element);
  }

  /** select() with a blank "any" choice for filters, and the selected value restored from the URL. */
  function filterSelect(id, label, options, selected, dataField) {
    const element = select(id, label, ["", ...options], selected || "");
    const control = element.querySelector("select");
    control.querySelector("option[value='']").textContent = "any";
    if (dataField) control.dataset.field = dataField;
    return element;
  }

  function section(label, ...children) {
    return h("section", { "aria-label": label }, h("h3", {}, label), ...children);
  }

  /** Integer from a form value; empty stays undefined so the server applies its default. */
  function int(value) {
    if (value === undefined || value === null || String(value).trim() === "") return undefined;
    const number = Number(value);
    return Number.isFinite(number) ? number : value;
  }

  /** ms epoch from a datetime-local value (the operator's local time), undefined when empty. */
  function ms(value) {
    if (!value) return undefined;
    const parsed = new Date(value).getTime();
    return Number.isNaN(parsed) ? undefined : parsed;
  }

  function localInput(msValue) {
    if (!msValue) return "";
    const date = new Date(Number(msValue));
    const pad = (n) => String(n).padStart(2, "0");
    return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
  }

  /** Loads with new filters; when the API refuses them, the previous ones come back (in the URL too), so later
   * reloads of the list do not repeat the refused request. */
  async function reverting(revert, load) {
    try {
      await load();
    } catch (error) {
      revert();
      throw error;
    }
  }

  /** replaceChildren() that skips absent parts and flattens lists, as h() does for its children. */
  function fill(container, ...children) {
    container.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  }

  function focusHeading(container) {
    const heading = container.querySelector("h3");
    if (!heading) return;
    heading.setAttribute("tabindex", "-1");
    heading.focus();
  }

  // MARK: - Rooms

  async function rooms(main, params) {
    main.append(screenHeading("Rooms"));
    const detail = h("section", { "aria-label": "Selected room" });
    let q = params.get("q") || "";
    const roomList = pagedList(
      (cursor) => api("GET", "/v1/rooms", { query: { q, limit: PAGE, cursor } }),
      (items) => wideTable(
        [["room_id", "Room id", code], ["name", "Name"], ["member_count", "Members"], ["created_by", "Creator"],
          ["created_at", "Created", time], ["destroy_at", "Destroyed at", time]],
        items,
        (room) => [
          rowButton("Inspect", `Inspect room ${room.room_id}`, () => guarded(() => inspect(room.room_id)), "secondary"),
          rowButton("Destroy", `Destroy room ${room.room_id}`, () => guarded(() => destroy(room.room_id)), "danger"),
        ], "Rooms"),
      "No rooms. Rooms are created when a user enters one (or with the form above); they go away once empty.");

    function keep(room) {
      setScreenParams({ q, room });
    }

    async function destroy(roomID) {
      if (!await confirmDestructive(`Destroy room ${roomID}? Its members are removed and its attributes deleted.`, roomID)) return;
      await api("DELETE", path("/v1/rooms/{room_id}", roomID));
      notify(`Room ${roomID} destroyed.`);
      fill(detail);
      keep(undefined);
      await roomList.first();
    }

    async function inspect(roomID) {
      const [room, attributes, online] = await Promise.all([
        api("GET", path("/v1/rooms/{room_id}", roomID)),
        api("GET", path("/v1/rooms/{room_id}/attributes", roomID)),
        api("GET", path("/v1/rooms/{room_id}/online_count", roomID)),
      ]);
      keep(roomID);
      const members = pagedList(
        (cursor) => api("GET", path("/v1/rooms/{room_id}/members", roomID), { query: { limit: 50, cursor } }),
        (items) => wideTable(
          [["user_id", "User id", code], ["name", "Name"], ["extended_data", "Extended data"], ["entered_at", "Entered", time]],
          items,
          (member) => [rowButton("Kick", `Kick ${member.user_id} from room ${roomID}`, () => guarded(async () => {
            if (!await confirmDestructive(`Remove ${member.user_id} from room ${roomID}?`)) return;
            const result = await api("POST", path("/v1/rooms/{room_id}/members/kick", roomID), { body: { user_ids: [member.user_id] } });
            batchProblems(result);
            await inspect(roomID);
          }), "danger")], "Room members"),
        "Nobody is in the room.");
      const memberAttributes = pagedList(
        (cursor) => api("GET", path("/v1/rooms/{room_id}/member_attributes", roomID), { query: { limit: 50, cursor } }),
        (items) => wideTable([["user_id", "User id", code], ["attributes", "Attributes", (v) => json(v)]], items, null, "Member attributes"),
        "No member holds member attributes.");
      fill(detail, 
        h("h3", {}, "Room ", h("code", {}, roomID)),
        describe({ ...room, online_count: online.count }),
        h("p", {}, rowButton("Destroy this room", `Destroy room ${roomID}`, () => guarded(() => destroy(roomID)), "danger")),
        h("h4", {}, "Members"), members.element,
        h("h4", {}, "Attributes"),
        attributes.attributes.length
          ? wideTable(
            [["key", "Key", code], ["value", "Value"], ["owner_id", "Owner"], ["delete_after_owner_left", "Deleted when the owner leaves", yesNo],
              ["updated_at", "Updated", time]],
            attributes.attributes,
            (attribute) => [rowButton("Delete", `Delete attribute ${attribute.key}`, () => guarded(async () => {
              if (!await confirmDestructive(`Delete attribute ${attribute.key} of room ${roomID}?`)) return;
              const result = await api("POST", path("/v1/rooms/{room_id}/attributes/delete", roomID),
                { body: { keys: [attribute.key], is_force: true } });
              batchProblems(result);
              await inspect(roomID);
            }), "danger")], "Room attributes")
          : emptyState("No attributes. Set one with the form below."),
        form("Set a room attribute", [
          field("room-attr-key", "Key", { required: true, "data-field": "attributes" }),
          field("room-attr-value", "Value", { "data-field": "attributes" }),
          field("room-attr-operator", "Operator (user id, optional)", { "data-field": "operator" }),
        ], "Set attribute", async (values) => {
          const body = { attributes: { [values["room-attr-key"]]: values["room-attr-value"] }, is_force: true };
          if (values["room-attr-operator"]) body.operator = values["room-attr-operator"];
          batchProblems(await api("POST", path("/v1/rooms/{room_id}/attributes", roomID), { body }));
          await inspect(roomID);
          notify(`Attribute ${values["room-attr-key"]} set.`);
        }),
        h("h4", {}, "Member attributes"), memberAttributes.element);
      await Promise.all([members.first(), memberAttributes.first()]);
      focusHeading(detail);
    }

    main.append(
      form("New room", [
        field("room-id", "Room id (optional)", { "data-field": "room_id" }),
        field("room-name", "Name", { "data-field": "name" }),
        field("room-creator", "Creator (user id, enters it)", { "data-field": "creator" }),
        field("room-delay", "Destroy delay (s)", { type: "number", "data-field": "destroy_delay_s" }),
      ], "Create room", async (values, element) => {
        const body = { name: values["room-name"] || undefined, room_id: values["room-id"] || undefined,
          creator: values["room-creator"] || undefined, destroy_delay_s: int(values["room-delay"]) };
        const room = await api("POST", "/v1/rooms", { body });
        element.reset();
        await roomList.first();
        notify(`Room ${room.room_id} created.`);
      }),
      form("Search rooms", [field("room-q", "Room id prefix or name", { type: "search", value: q, "data-field": "q" })], "Search",
        async (values) => {
          const previous = q;
          q = values["room-q"];
          keep(undefined);
          fill(detail);
          await reverting(() => { q = previous; keep(undefined); }, roomList.first);
        }),
      roomList.element, detail);
    await roomList.first();
    if (params.get("room")) await inspect(params.get("room"));
  }

  /** A batch answer (`results[]` per item) with failed items: shown as one problem, the rest applied. */
  function batchProblems(result) {
    const failed = (result && result.results ? result.results : []).filter((r) => r.error);
    if (failed.length) {
      showProblem(new Problem(207, {
        title: "some items failed", detail: failed.map((r) => `${r.id ?? ""}: ${r.error.title || r.error.code}${r.error.detail ? ` (${r.error.detail})` : ""}`).join("; "),
      }));
    }
  }

  // MARK: - Calls

  async function calls(main, params) {
    main.append(screenHeading("Calls"));
    main.append(h("p", { class: "muted" }, "The API lists calls per user: enter a user to see the calls they are or were in, or open a call by its id."));
    const detail = h("section", { "aria-label": "Selected call" });
    const results = h("div", {});
    let filters = { user: params.get("user") || "", state: params.get("state") || "" };

    function keep(call) {
      setScreenParams({ ...filters, call });
    }

    async function search() {
      if (!filters.user) {
        fill(results, emptyState("Enter a user id above to list that user's calls."));
        return;
      }
      const callList = pagedList(
        (cursor) => api("GET", path("/v1/users/{user_id}/calls", filters.user), { query: { state: filters.state, limit: PAGE, cursor } }),
        (items) => wideTable(
          [["call_id", "Call id", code], ["mode", "Mode"], ["state", "State"], ["caller_id", "Caller"],
            ["users", "Users", (users) => users.map((u) => `${u.user_id} (${u.state})`).join(", ")],
            ["created_at", "Started", time], ["end_reason", "End reason"]],
          items,
          (call) => [rowButton("Inspect", `Inspect call ${call.call_id}`, () => guarded(() => inspect(call.call_id)), "secondary")],
          `Calls of ${filters.user}`),
        `No ${filters.state || ""} calls for ${filters.user}.`);
      fill(results, callList.element);
      await callList.first();
    }

    async function inspect(callID) {
      const call = await api("GET", path("/v1/calls/{call_id}", callID));
      keep(callID);
      const accepted = call.users.filter((u) => u.state === "accepted").map((u) => u.user_id);
      const pending = call.users.filter((u) => ["inviting", "received", "not_yet_received"].includes(u.state));
      const endControls = [];
      if (call.state === "started" && call.mode === "advanced" && accepted.length) {
        endControls.push(form("End the call", [select("call-end-operator", "As (an accepted user)", accepted, accepted[0])], "End call",
          async (values) => {
            if (!await confirmDestructive(`End call ${callID} for everyone?`)) return;
            await api("POST", path("/v1/calls/{call_id}/end", callID), { body: { operator: values["call-end-operator"] } });
            await inspect(callID);
            notify(`Call ${callID} ended.`);
          }));
      } else if (call.state === "started" && pending.length) {
        // A general call ends once nobody is pending: withdrawing the caller's invitations ends it.
        endControls.push(h("p", {}, rowButton("End call (cancel pending invitations)", `End call ${callID}`, () => guarded(async () => {
          if (!await confirmDestructive(`End call ${callID}? The pending invitations of ${call.caller_id} are withdrawn.`)) return;
          const result = await api("POST", path("/v1/calls/{call_id}/cancel", callID), { body: { operator: call.caller_id } });
          batchProblems(result);
          await inspect(callID);
          notify(`Invitations of call ${callID} cancelled.`);
        }), "danger")));
      } else if (call.state === "started") {
        endControls.push(emptyState("This call has nobody pending and nobody accepted who could end it."));
      }
      fill(detail, 
        h("h3", {}, "Call ", h("code", {}, callID)),
        describe(call, { users: () => "see below" }),
        wideTable(
          [["user_id", "User", code], ["state", "State"], ["inviter_id", "Invited by"], ["invited_at", "Invited", time],
            ["accepted_at", "Accepted", time], ["quit_at", "Quit", time], ["extended_data", "Extended data"]],
          call.users, null, "Call users"),
        ...endControls);
      focusHeading(detail);
    }

    main.append(
      form("Find calls", [
        field("call-user", "User id", { value: filters.user, "data-field": "user_id" }),
        filterSelect("call-state", "State", ["started", "ended"], filters.state, "state"),
      ], "List calls", async (values) => {
        const previous = filters;
        filters = { user: values["call-user"].trim(), state: values["call-state"] };
        keep(undefined);
        fill(detail);
        await reverting(() => { filters = previous; keep(undefined); }, search);
      }),
      form("Open a call", [field("call-id", "Call id", { required: true, "data-field": "call_id" })], "Open",
        (values) => inspect(values["call-id"].trim())),
      results, detail);
    await search();
    if (params.get("call")) await inspect(params.get("call"));
  }

  // MARK: - Webhooks

  const DELIVERY_STATUSES = ["pending", "succeeded", "failed", "dead"];

  function webhookFields(prefix, hook = {}) {
    return [
      field(`${prefix}-url`, "URL", { type: "url", required: !hook.webhook_id, value: hook.url || "", "data-field": "url" }),
      field(`${prefix}-types`, "Event types (comma separated: *, message.*, user.created)", {
        required: !hook.webhook_id, value: list(hook.event_types), "data-field": "event_types" }),
      field(`${prefix}-description`, "Description", { value: hook.description || "", "data-field": "description" }),
      field(`${prefix}-timeout`, "Timeout (ms)", { type: "number", value: hook.timeout_ms ?? "", "data-field": "timeout_ms" }),
      field(`${prefix}-disable-failures`, "Disable after failures", {
        type: "number", value: hook.disable_after_failures ?? "", "data-field": "disable_after_failures" }),
      field(`${prefix}-disable-s`, "Disable after (s)", { type: "number", value: hook.disable_after_s ?? "", "data-field": "disable_after_s" }),
      checkbox(`${prefix}-fail-open`, "Fail open (before-event hooks)", hook.fail_open ?? true, { "data-field": "fail_open" }),
    ];
  }

  function webhookBody(prefix, values, element) {
    const body = {
      url: values[`${prefix}-url`] || undefined,
      event_types: values[`${prefix}-types`] !== undefined ? splitList(values[`${prefix}-types`]) : undefined,
      description: values[`${prefix}-description`],
      timeout_ms: int(values[`${prefix}-timeout`]),
      disable_after_failures: int(values[`${prefix}-disable-failures`]),
      disable_after_s: int(values[`${prefix}-disable-s`]),
      fail_open: element.querySelector(`#${prefix}-fail-open`).checked,
    };
    if (body.event_types && body.event_types.length === 0) body.event_types = undefined;
    return body;
  }

  async function webhooks(main, params) {
    main.append(screenHeading("Webhooks"));
    const detail = h("section", { "aria-label": "Selected endpoint" });
    const deliveryDetail = h("section", { "aria-label": "Selected delivery" });
    let state = {
      webhook: params.get("webhook") || undefined, status: params.get("status") || "", kind: params.get("kind") || "",
      event_type: params.get("event_type") || "", delivery: params.get("delivery") || undefined,
    };
    const keep = () => setScreenParams(state);

    const endpointList = pagedList(
      (cursor) => api("GET", "/v1/webhooks", { query: { limit: PAGE, cursor } }),
      (items) => wideTable(
        [["webhook_id", "Id", code], ["url", "URL", code], ["event_types", "Events", list],
          ["enabled", "Enabled", (v, hook) => (v ? "yes" : `no (${hook.disabled_reason || "manual"})`)],
          ["consecutive_failures", "Failures in a row"], ["description", "Description"]],
        items,
        (hook) => [
          rowButton("Open", `Open endpoint ${hook.webhook_id}`, () => guarded(() => {
            state = { webhook: hook.webhook_id, status: "", kind: "", event_type: "", delivery: undefined };
            return open();
          }), "secondary"),
          rowButton("Delete", `Delete endpoint ${hook.webhook_id}`, () => guarded(() => remove(hook.webhook_id)), "danger"),
        ], "Webhook endpoints"),
      "No endpoints. Add one with the form above to receive the app's events over HTTP.");

    async function remove(webhookID) {
      if (!await confirmDestructive(`Delete webhook endpoint ${webhookID}? Its pending deliveries are dropped.`, webhookID)) return;
      await api("DELETE", path("/v1/webhooks/{webhook_id}", webhookID));
      notify(`Endpoint ${webhookID} deleted.`);
      if (state.webhook === webhookID) {
        state = { status: "", kind: "", event_type: "" };
        fill(detail);
        fill(deliveryDetail);
      }
      keep();
      await endpointList.first();
    }

    async function setEnabled(hook, enabled) {
      if (!enabled && !await confirmDestructive(`Disable endpoint ${hook.webhook_id}? Events written while it is disabled get no delivery.`)) return;
      await api("PATCH", path("/v1/webhooks/{webhook_id}", hook.webhook_id), { body: { enabled } });
      await Promise.all([endpointList.first(), open()]);
      notify(`Endpoint ${hook.webhook_id} ${enabled ? "re-enabled (failure count reset)" : "disabled"}.`);
    }

    async function open() {
      const webhookID = state.webhook;
      const hook = await api("GET", path("/v1/webhooks/{webhook_id}", webhookID));
      keep();
      const pingResult = h("div", { role: "status" });
      const deliveries = pagedList(
        (cursor) => api("GET", path("/v1/webhooks/{webhook_id}/deliveries", webhookID), {
          query: { status: state.status, kind: state.kind, event_type: state.event_type, limit: PAGE, cursor } }),
        (items) => wideTable(
          [["delivery_id", "Delivery", code], ["kind", "Kind"], ["event_type", "Event type"], ["event_id", "Event"],
            ["status", "Status"], ["attempts", "Attempts"], ["last_status_code", "Last HTTP status"], ["last_error", "Last error"],
            ["duration_ms", "Duration (ms)"], ["created_at", "Created", time], ["next_attempt_at", "Next attempt", time]],
          items,
          (delivery) => [
            rowButton("Attempts", `Attempts of delivery ${delivery.delivery_id}`, () => guarded(() => showDelivery(delivery.delivery_id)), "secondary"),
            delivery.kind === "after" && delivery.status !== "pending"
              ? rowButton("Retry", `Retry delivery ${delivery.delivery_id}`, () => guarded(() => retry(delivery.delivery_id)))
              : null,
          ], "Deliveries"),
        "No deliveries match. A delivery appears once its first attempt is made; ping the endpoint to make one now.");

      async function retry(deliveryID) {
        const delivery = await api("POST", path("/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/retry", webhookID, deliveryID));
        await deliveries.first();
        notify(`Delivery ${deliveryID} queued again (${delivery.status}).`);
      }

      async function showDelivery(deliveryID) {
        const delivery = await api("GET", path("/v1/webhooks/{webhook_id}/deliveries/{delivery_id}", webhookID, deliveryID));
        state.delivery = deliveryID;
        keep();
        fill(deliveryDetail, 
          h("h3", {}, "Delivery ", h("code", {}, deliveryID)),
          describe(delivery, { attempts: (a) => `${a.length}` }),
          delivery.attempts.length
            ? wideTable([["at", "At", time], ["status_code", "HTTP status"], ["error", "Error"], ["duration_ms", "Duration (ms)"]],
              delivery.attempts, null, "Attempts")
            : emptyState("No attempt yet."));
        focusHeading(deliveryDetail);
      }

      fill(detail, 
        h("h3", {}, "Endpoint ", h("code", {}, webhookID)),
        describe(hook, { secret: () => h("details", {}, h("summary", {}, "Signing secret"), h("code", {}, hook.secret)) }),
        h("p", { class: "toolbar" },
          button("Ping", () => guarded(async () => {
            const result = await api("POST", path("/v1/webhooks/{webhook_id}/ping", webhookID));
            fill(pingResult, h("p", { class: result.ok ? "ok" : "bad" },
              `Ping: ${result.ok ? "acknowledged" : "failed"}; HTTP ${result.status_code ?? "none"}, ${result.duration_ms} ms${result.error ? `, ${result.error}` : ""}.`));
            await deliveries.first();
          })),
          hook.enabled
            ? button("Disable", () => guarded(() => setEnabled(hook, false)), "danger")
            : button("Re-enable", () => guarded(() => setEnabled(hook, true))),
          button("Rotate secret", () => guarded(async () => {
            if (!await confirmDestructive(`Rotate the secret of ${webhookID}? The old one keeps signing for 24 h.`)) return;
            await api("POST", path("/v1/webhooks/{webhook_id}/rotate_secret", webhookID), { body: {} });
            await open();
            notify("Secret rotated: the new one is shown under “Signing secret”.");
          }), "secondary"),
          rowButton("Delete", `Delete endpoint ${webhookID}`, () => guarded(() => remove(webhookID)), "danger")),
        pingResult,
        form("Edit endpoint", webhookFields("hook-edit", hook), "Save", async (values, element) => {
          await api("PATCH", path("/v1/webhooks/{webhook_id}", webhookID), { body: webhookBody("hook-edit", values, element) });
          await Promise.all([endpointList.first(), open()]);
          notify(`Endpoint ${webhookID} saved.`);
        }),
        form("Recover missed events", [
          field("hook-since", "Since (an event id, or an RFC 3339 time)", { required: true, "data-field": "since" }),
        ], "Recover", async (values) => {
          const result = await api("POST", path("/v1/webhooks/{webhook_id}/recover", webhookID), { body: { since: values["hook-since"].trim() } });
          await deliveries.first();
          notify(`${result.created} deliver${result.created === 1 ? "y" : "ies"} recovered.`);
        }),
        h("h4", {}, "Deliveries"),
        form("Filter deliveries", [
          filterSelect("delivery-status", "Status", DELIVERY_STATUSES, state.status, "status"),
          filterSelect("delivery-kind", "Kind", ["after", "before", "ping"], state.kind, "kind"),
          field("delivery-event-type", "Event type (exact)", { value: state.event_type, "data-field": "event_type" }),
        ], "Filter", async (values) => {
          const previous = { ...state };
          Object.assign(state, { status: values["delivery-status"], kind: values["delivery-kind"], event_type: values["delivery-event-type"].trim() });
          keep();
          await reverting(() => { Object.assign(state, previous); keep(); }, deliveries.first);
        }),
        deliveries.element);
      await deliveries.first();
      focusHeading(detail);
      if (state.delivery) await showDelivery(state.delivery);
    }

    main.append(
      form("New endpoint", webhookFields("hook-new"), "Create endpoint", async (values, element) => {
        const created = await api("POST", "/v1/webhooks", { body: webhookBody("hook-new", values, element) });
        element.reset();
        await endpointList.first();
        notify(h("p", { class: "secret" }, `Endpoint ${created.webhook_id} created. Its signing secret: `, h("code", {}, created.secret)));
      }),
      endpointList.element, detail, deliveryDetail);
    await endpointList.first();
    if (state.webhook) await open();
  }

  // MARK: - Push

  async function push(main, params) {
    main.append(screenHeading("Push"));
    let filters = Object.fromEntries(["user_id", "message_id", "call_id", "kind", "status"].map((k) => [k, params.get(k) || ""]));
    let deviceUser = params.get("devices") || "";
    let attempt = params.get("attempt") || undefined;
    const keep = () => setScreenParams({ ...filters, devices: deviceUser, attempt });
    const settingsBox = h("div", {});
    const attemptDetail = h("section", { "aria-label": "Selected attempt" });
    const deviceBox = h("div", {});
    const testResult = h("div", {});

    async function showSettings() {
      const settings = await api("GET", "/v1/settings");
      const p = settings.push || {};
      fill(settingsBox, 
        h("p", {}, p.enabled && p.gateway_url ? `Push is on: ${p.format} requests to ${p.gateway_url}.`
          : "Push is off: nothing is planned or recorded until it is enabled with a gateway URL."),
        form("Push settings", [
          checkbox("push-enabled", "Enabled", p.enabled, { "data-field": "push.enabled" }),
          field("push-gateway", "Gateway URL", { type: "url", value: p.gateway_url || "", "data-field": "push.gateway_url" }),
          select("push-format", "Format", ["matrix", "generic"], p.format || "matrix"),
          checkbox("push-event-id-only", "Event id only (no texts or names)", p.event_id_only, { "data-field": "push.event_id_only" }),
          field("push-timeout", "Timeout (ms, 100–30000)", { type: "number", value: p.timeout_ms ?? "", "data-field": "push.timeout_ms" }),
          field("push-max-attempts", "Max attempts (1–10)", { type: "number", value: p.max_attempts ?? "", "data-field": "push.max_attempts" }),
          field("push-secret", "New secret for generic requests (empty: keep)", { autocomplete: "off", "data-field": "push.secret" }),
        ], "Save push settings", async (values, element) => {
          const body = {
            enabled: element.querySelector("#push-enabled").checked,
            gateway_url: values["push-gateway"] || null,
            format: values["push-format"],
            event_id_only: element.querySelector("#push-event-id-only").checked,
            timeout_ms: int(values["push-timeout"]),
            max_attempts: int(values["push-max-attempts"]),
          };
          if (values["push-secret"]) body.secret = values["push-secret"];
          await api("PATCH", "/v1/settings", { body: { push: body } });
          await showSettings();
          notify("Push settings saved.");
        }));
      settingsBox.querySelector("#push-format").dataset.field = "push.format";
    }

    const attempts = pagedList(
      (cursor) => api("GET", "/v1/push/attempts", { query: { ...filters, limit: PAGE, cursor } }),
      (items) => wideTable(
        [["attempt_id", "Attempt", code], ["kind", "Kind"], ["user_id", "User"], ["status", "Status"], ["reason", "Decision / reason"],
          ["gateway_status", "Gateway status"], ["tries", "Tries"], ["message_id", "Message", code], ["call_id", "Call", code],
          ["created_at", "Created", time]],
        items,
        (item) => [rowButton("Inspect", `Inspect attempt ${item.attempt_id}`, () => guarded(() => inspectAttempt(item.attempt_id)), "secondary")],
        "Push attempts"),
      "No attempts match. Attempts are recorded once push is enabled and a recipient with devices is offline; try a dry run below.");

    async function inspectAttempt(attemptID) {
      const item = await api("GET", path("/v1/push/attempts/{attempt_id}", attemptID));
      attempt = attemptID;
      keep();
      fill(attemptDetail, h("h3", {}, "Attempt ", h("code", {}, attemptID)), describe(item));
      focusHeading(attemptDetail);
    }

    async function showDevices() {
      if (!deviceUser) {
        fill(deviceBox, emptyState("Enter a user id to list that user's push devices."));
        return;
      }
      const page = await api("GET", path("/v1/users/{user_id}/devices", deviceUser));
      fill(deviceBox, 
        page.items.length
          ? wideTable(
            [["device_id", "Device", code], ["platform", "Platform"], ["provider", "Provider"], ["app_id", "App id"], ["voip", "VoIP", yesNo],
              ["push_key", "Push key", code], ["last_push_at", "Last push", time], ["updated_at", "Updated", time]],
            page.items,
            (device) => [rowButton("Delete", `Delete device ${device.device_id}`, () => guarded(async () => {
              if (!await confirmDestructive(`Delete device ${device.device_id} of ${deviceUser}? It gets no more pushes.`, device.device_id)) return;
              await api("DELETE", path("/v1/users/{user_id}/devices/{device_id}", deviceUser, device.device_id));
              await showDevices();
              notify(`Device ${device.device_id} deleted.`);
            }), "danger")], `Devices of ${deviceUser}`)
          : emptyState(`${deviceUser} has no devices: a client registers one with POST /v1/users/{user_id}/devices (or the form below).`),
        form("Register a device", [
          select("device-platform", "Platform", ["ios", "android", "web", "win", "macos", "linux", "ipados", "ohos", "miniprogram", "unknown"], "android"),
          select("device-provider", "Provider", ["fcm", "apns", "hms", "honor", "xiaomi", "oppo", "vivo", "meizu", "webpush"], "fcm"),
          field("device-push-key", "Push key", { required: true, "data-field": "push_key" }),
          field("device-app-id", "Bundle id / package", { required: true, "data-field": "app_id" }),
          checkbox("device-voip", "VoIP", false),
        ], "Register device", async (values, element) => {
          await api("POST", path("/v1/users/{user_id}/devices", deviceUser), { body: {
            platform: values["device-platform"], provider: values["device-provider"], push_key: values["device-push-key"],
            app_id: values["device-app-id"], voip: element.querySelector("#device-voip").checked } });
          await showDevices();
          notify(`Device registered for ${deviceUser}.`);
        }));
    }

    function renderTest(result) {
      fill(testResult, 
        h("h4", {}, "Decisions"),
        result.decisions.length
          ? wideTable([["device_id", "Device", code], ["platform", "Platform"], ["provider", "Provider"], ["selected", "Selected", yesNo],
            ["reason", "Reason"]], result.decisions, null, "Push decisions")
          : emptyState("The user has no devices: no push would be sent."),
        h("h4", {}, "Gateway request"), result.request ? json(result.request) : emptyState("None: no device is selected."),
        ...(result.response ? [h("h4", {}, "Gateway response"), json(result.response)] : []),
        ...(result.attempt ? [h("h4", {}, "Recorded attempt"), describe(result.attempt)] : []));
    }

    main.append(
      section("Settings", settingsBox),
      section("Attempts",
        form("Filter attempts", [
          field("attempt-user", "User id", { value: filters.user_id, "data-field": "user_id" }),
          field("attempt-message", "Message id", { value: filters.message_id, "data-field": "message_id" }),
          field("attempt-call", "Call id", { value: filters.call_id, "data-field": "call_id" }),
          filterSelect("attempt-kind", "Kind", ["message", "revoke", "call", "call_cancel", "broadcast", "application", "test"], filters.kind, "kind"),
          filterSelect("attempt-status", "Status", ["pending", "sent", "rejected", "failed", "suppressed"], filters.status, "status"),
        ], "Filter", async (values) => {
          const previous = filters;
          filters = { user_id: values["attempt-user"].trim(), message_id: values["attempt-message"].trim(), call_id: values["attempt-call"].trim(),
            kind: values["attempt-kind"], status: values["attempt-status"] };
          attempt = undefined;
          keep();
          await reverting(() => { filters = previous; keep(); }, attempts.first);
        }),
        attempts.element, attemptDetail),
      section("Devices",
        form("Show devices", [field("device-user", "User id", { required: true, value: deviceUser, "data-field": "user_id" })], "Show devices",
          async (values) => {
            const previous = deviceUser;
            deviceUser = values["device-user"].trim();
            keep();
            await reverting(() => { deviceUser = previous; keep(); }, showDevices);
          }),
        deviceBox),
      section("Test a push",
        h("p", { class: "muted" }, "What the bridge would do for one recipient: a dry run sends nothing. Give a text (sent as “From” in a peer or group conversation), or a stored message id, or a call id."),
        form("Push test", [
          field("test-user", "Recipient user id", { required: true, "data-field": "user_id" }),
          field("test-from", "From (for a text)", { "data-field": "message.from" }),
          select("test-type", "Conversation", ["peer", "group"], "peer"),
          field("test-to", "To (user or group id)", { "data-field": "message.to" }),
          field("test-text", "Text", { "data-field": "message.body" }),
          field("test-message-id", "or a stored message id", { "data-field": "message_id" }),
          field("test-call-id", "or a call id", { "data-field": "call_id" }),
          checkbox("test-dry-run", "Dry run (send nothing)", true, { "data-field": "dry_run" }),
        ], "Run test", async (values, element) => {
          const body = { user_id: values["test-user"].trim(), dry_run: element.querySelector("#test-dry-run").checked };
          if (values["test-message-id"]) body.message_id = values["test-message-id"].trim();
          if (values["test-call-id"]) body.call_id = values["test-call-id"].trim();
          if (values["test-text"] || values["test-from"] || values["test-to"]) {
            body.message = { from: values["test-from"], conversation_type: values["test-type"], to: values["test-to"], type: 1,
              body: { text: values["test-text"] } };
          }
          if (!body.dry_run && !await confirmDestructive(`Really send a test push to ${body.user_id}'s devices?`)) return;
          renderTest(await api("POST", "/v1/push/test", { body }));
          if (!body.dry_run) await attempts.first();
        }),
        testResult));
    await Promise.all([showSettings(), attempts.first(), showDevices()]);
    if (attempt) await inspectAttempt(attempt);
  }

  // MARK: - Event log

  /** The server's own OpenAPI document describes every event type (its `webhooks`): read once, on demand. */
  let openAPI = null;
  async function eventTypeDoc(type) {
    if (openAPI === null) openAPI = await api("GET", "/openapi.json", { credential: false });
    const entry = openAPI.webhooks && openAPI.webhooks[type] && openAPI.webhooks[type].post;
    if (!entry) return null;
    const schema = entry.requestBody?.content?.["application/json"]?.schema;
    const data = (schema?.allOf || []).map((part) => part.properties?.data).find(Boolean);
    return { summary: entry.summary, description: entry.description, data: data?.description || null };
  }

  async function eventlog(main, params) {
    main.append(screenHeading("Event log"));
    const keys = ["types", "user_id", "group_id", "room_id", "after"];
    let filters = Object.fromEntries(keys.map((k) => [k, params.get(k) || ""]));
    let doc = params.get("doc") || undefined;
    let shown = params.get("event") || undefined;
    const keep = () => setScreenParams({ ...filters, doc, event: shown });
    const docBox = h("section", { "aria-label": "Event type reference" });
    const eventBox = h("section", { "aria-label": "Selected event" });
    const rows = h("div", {});
    const newer = button("Newer events", () => guarded(() => next()), "secondary");
    const trimmed = h("p", { class: "bad", role: "status" });
    trimmed.hidden = true;
    let after = null;
    let seen = [];

    function typeLink(type) {
      // A link, not a button: it keeps the filters and can be opened in a new tab or shared.
      return h("a", { href: `#eventlog${queryString({ ...filters, doc: type })}`, "aria-label": `${type}: documentation`,
        onclick: (event) => { event.preventDefault(); guarded(() => showDoc(type)); } }, type);
    }

    async function showDoc(type) {
      doc = type;
      keep();
      const entry = await eventTypeDoc(type);
      fill(docBox, h("h3", {}, "Event type ", h("code", {}, type)),
        entry ? [h("p", {}, entry.description || entry.summary), entry.data ? h("p", { class: "muted" }, entry.data) : null,
          h("p", { class: "muted" }, "From the server's OpenAPI document (", h("a", { href: "/openapi.json" }, "/openapi.json"), ", its webhooks).")]
          : emptyState(`${type} is not described in this server's OpenAPI document.`));
      focusHeading(docBox);
    }

    function showEvent(event) {
      shown = event.id;
      keep();
      fill(eventBox, h("h3", {}, "Event ", h("code", {}, event.id), " ", event.type), describe(event));
      focusHeading(eventBox);
    }

    async function next() {
      const start = after ?? (filters.after || "earliest");
      const page = await api("GET", "/v1/events/log", {
        query: { after: start, limit: 50, types: filters.types, user_id: filters.user_id, group_id: filters.group_id, room_id: filters.room_id } });
      // previous_event_id after the first page names where the log really started: events before it were trimmed.
      if (after === null && filters.after && page.previous_event_id && page.previous_event_id !== filters.after) {
        trimmed.textContent = `Events after ${filters.after} up to ${page.previous_event_id} were trimmed from the log.`;
        trimmed.hidden = false;
      }
      if (page.items.length) {
        seen = seen.concat(page.items);
        rows.append(wideTable(
          [["id", "Id", code], ["type", "Type", typeLink], ["created_at", "At", time], ["data", "Summary", (_, e) => summarize(e)]],
          page.items,
          (event) => [rowButton("Data", `Data of event ${event.id}`, () => showEvent(event), "secondary")],
          "Events"));
      } else if (after === null) {
        rows.append(emptyState("No events match. Widen the filters, or start from the earliest event (leave “After” empty)."));
      }
      // The log has no end: keep the newest id so "Newer events" asks for what was written since.
      if (page.next_cursor) after = page.next_cursor;
      else if (after === null) after = start;
      newer.textContent = page.items.length === 50 ? "More events" : "Newer events";
    }

    async function reload() {
      fill(rows);
      trimmed.hidden = true;
      after = null;
      seen = [];
      await next();
    }

    main.append(
      form("Filter events", [
        field("log-types", "Types (comma separated; message.* and * allowed)", { value: filters.types, "data-field": "types" }),
        field("log-user", "User id (audience)", { value: filters.user_id, "data-field": "user_id" }),
        field("log-group", "Group id", { value: filters.group_id, "data-field": "group_id" }),
        field("log-room", "Room id", { value: filters.room_id, "data-field": "room_id" }),
        field("log-after", "After event id (empty: the earliest)", { value: filters.after, inputmode: "numeric", "data-field": "after" }),
      ], "Show events", async (values) => {
        const previous = filters;
        filters = { types: values["log-types"].replace(/\s+/g, ""), user_id: values["log-user"].trim(), group_id: values["log-group"].trim(),
          room_id: values["log-room"].trim(), after: values["log-after"].trim() };
        shown = undefined;
        fill(eventBox);
        keep();
        await reverting(() => { filters = previous; keep(); }, reload);
      }),
      h("p", { class: "muted" }, "Events are kept for the app's event_retention_hours (72 h by default), oldest first; the API reads forward from an event id."),
      trimmed, rows, newer, eventBox, docBox);
    await reload();
    if (shown) {
      const event = seen.find((e) => e.id === shown);
      if (event) showEvent(event);
    }
    if (doc) await showDoc(doc);
  }

  // MARK: - Files

  async function files(main, params) {
    main.append(screenHeading("Files"));
    let filters = { user_id: params.get("user_id") || "", kind: params.get("kind") || "" };
    let selected = params.get("file") || undefined;
    const keep = () => setScreenParams({ ...filters, file: selected });
    const detail = h("section", { "aria-label": "Selected file" });
    const fileList = pagedList(
      (cursor) => api("GET", "/v1/files", { query: { ...filters, limit: PAGE, cursor } }),
      (items) => wideTable(
        [["file_id", "File id", code], ["file_name", "Name"], ["kind", "Kind"], ["file_size", "Size", formatBytes], ["owner_id", "Owner"],
          ["created_at", "Uploaded", time]],
        items,
        (file) => [
          rowButton("Inspect", `Inspect file ${file.file_id}`, () => guarded(() => inspect(file.file_id)), "secondary"),
          rowButton("Delete", `Delete file ${file.file_id}`, () => guarded(() => remove(file.file_id)), "danger"),
        ], "Files"),
      "No files match. Users upload files with POST /v1/files (or the upload form above).");

    async function inspect(fileID) {
      const file = await api("GET", path("/v1/files/{file_id}/meta", fileID));
      selected = fileID;
      keep();
      fill(detail, 
        h("h3", {}, "File ", h("code", {}, fileID)),
        file.thumbnail_url ? h("img", { src: file.thumbnail_url, alt: file.file_name, class: "thumb", width: file.thumbnail_width, height: file.thumbnail_height }) : null,
        describe(file, { url: (u) => h("a", { href: u, download: file.file_name }, "Download (signed URL)"),
          file_size: formatBytes }),
        h("p", {}, rowButton("Delete this file", `Delete file ${fileID}`, () => guarded(() => remove(fileID)), "danger")));
      focusHeading(detail);
    }

    async function remove(fileID) {
      if (!await confirmDestructive(`Delete file ${fileID}? Downloads answer 404 afterwards; messages keep its id.`, fileID)) return;
      await api("DELETE", path("/v1/files/{file_id}", fileID));
      notify(`File ${fileID} deleted.`);
      if (selected === fileID) {
        selected = undefined;
        fill(detail);
      }
      keep();
      await fileList.first();
    }

    /** Upload sends the raw bytes: api() speaks JSON only, so this one request is made with fetch and the same headers. */
    async function upload(formElement, owner) {
      const input = formElement.querySelector("#file-upload");
      const chosen = input.files[0];
      if (!chosen) throw new Problem(400, { title: "choose a file", errors: [{ field: "file", message: "choose a file to upload" }] });
      const headers = { ...authHeaders("/v1/files"), "Parley-File-Name": encodeURIComponent(chosen.name),
        "Content-Type": chosen.type || "application/octet-stream" };
      const response = await fetch(`/v1/files${queryString({ user_id: owner })}`, { method: "POST", headers, body: chosen, cache: "no-store" });
      const data = await response.json().catch(() => null);
      if (!response.ok) throw new Problem(response.status, data);
      return data;
    }

    main.append(
      form("Upload a file", [
        h("label", { for: "file-upload" }, "File", h("input", { id: "file-upload", name: "file-upload", type: "file", "data-field": "file" })),
        field("file-owner", "Owner user id (empty: the app)", { "data-field": "user_id" }),
      ], "Upload", async (values, element) => {
        const file = await upload(element, values["file-owner"].trim());
        element.reset();
        await fileList.first();
        notify(`File ${file.file_id} uploaded.`);
      }),
      form("Filter files", [
        field("file-user", "Owner user id", { value: filters.user_id, "data-field": "user_id" }),
        filterSelect("file-kind", "Kind", ["image", "file", "audio", "video"], filters.kind, "kind"),
      ], "Filter", async (values) => {
        const previous = filters;
        filters = { user_id: values["file-user"].trim(), kind: values["file-kind"] };
        selected = undefined;
        fill(detail);
        keep();
        await reverting(() => { filters = previous; keep(); }, fileList.first);
      }),
      fileList.element, detail);
    await fileList.first();
    if (selected) await inspect(selected);
  }

  // MARK: - Moderation

  const REPORT_ACTIONS = ["dismiss", "delete_message", "mute_user", "ban_user", "warn_user", "remove_from_group"];

  function targetText(target) {
    return target ? `${target.type} ${target.message_id || target.user_id || target.group_id || target.id || ""}` : "";
  }

  async function moderation(main, params) {
    main.append(screenHeading("Moderation"));
    let filters = { status: params.get("status") ?? "open", target_type: params.get("target_type") || "", reason: params.get("reason") || "",
      user_id: params.get("user_id") || "" };
    let logFilters = { log_user: params.get("log_user") || "", log_action: params.get("log_action") || "",
      log_moderator: params.get("log_moderator") || "", log_from: params.get("log_from") || "", log_to: params.get("log_to") || "" };
    let selected = params.get("report") || undefined;
    const keep = () => setScreenParams({ ...filters, ...logFilters, report: selected });
    const detail = h("section", { "aria-label": "Selected report" });
    const jobResult = h("div", { role: "status" });

    const queue = pagedList(
      (cursor) => api("GET", "/v1/reports", { query: { ...filters, limit: PAGE, cursor } }),
      (items) => wideTable(
        [["report_id", "Report", code], ["status", "Status"], ["reason", "Reason"], ["target", "Target", targetText],
          ["reporter_id", "Reporter"], ["report_count", "Open on target"], ["comment", "Comment"], ["created_at", "Filed", time]],
        items,
        (report) => [rowButton("Review", `Review report ${report.report_id}`, () => guarded(() => review(report.report_id)), "secondary")],
        "Reports"),
      "The queue is empty: no report matches. Users file reports with POST /v1/reports; blocklists that flag file them too.");

    const log = pagedList(
      (cursor) => api("GET", "/v1/moderation/log", { query: {
        user_id: logFilters.log_user, action: logFilters.log_action, moderator: logFilters.log_moderator,
        from: logFilters.log_from, to: logFilters.log_to, limit: PAGE, cursor } }),
      (items) => wideTable(
        [["at", "At", time], ["action", "Action"], ["target", "Target", targetText], ["moderator", "Moderator"], ["source", "Source"],
          ["params", "Params", (v) => json(v)]],
        items, null, "Moderation log"),
      "No moderation actions match.");

    async function review(reportID) {
      const report = await api("GET", path("/v1/reports/{report_id}", reportID));
      selected = reportID;
      keep();
      fill(detail, 
        h("h3", {}, "Report ", h("code", {}, reportID), ` (${report.status})`),
        describe(report, { reports: (r) => `${r.length} on this target (below)`, target: targetText, target_snapshot: (s) => json(s),
          actions: (a) => (a.length ? json(a) : "none yet") }),
        report.status === "open"
          ? form("Decide", [
            select("report-action", "Action", REPORT_ACTIONS, "dismiss"),
            field("report-duration", "Duration (s; mute, ban)", { type: "number", "data-field": "duration_s" }),
            field("report-text", "Warning text (warn)", { "data-field": "text" }),
            field("report-group", "Group id (remove a reported user from a group)", { "data-field": "group_id" }),
            field("report-note", "Note", { "data-field": "note" }),
            field("report-moderator", "Moderator", { "data-field": "moderator" }),
          ], "Apply", async (values) => {
            const action = values["report-action"];
            if (action !== "dismiss" && !await confirmDestructive(`Apply ${action} to ${targetText(report.target)}? Every open report on it closes.`)) return;
            const body = { action, duration_s: int(values["report-duration"]), text: values["report-text"] || undefined,
              group_id: values["report-group"] || undefined, note: values["report-note"] || undefined, moderator: values["report-moderator"] || undefined };
            const closed = await api("POST", path("/v1/reports/{report_id}/actions", reportID), { body });
            await Promise.all([queue.first(), log.first(), review(reportID)]);
            notify(`Report ${reportID} ${closed.status}.`);
          })
          : emptyState("This report is closed; a new report on the target opens the queue again."),
        h("h4", {}, "Reports on the same target"),
        wideTable([["report_id", "Report", code], ["status", "Status"], ["reason", "Reason"], ["reporter_id", "Reporter"], ["comment", "Comment"],
          ["created_at", "Filed", time]], report.reports || [], null, "Reports on the target"));
      detail.querySelector("#report-action")?.setAttribute("data-field", "action");
      focusHeading(detail);
    }

    main.append(
      section("Review queue",
        form("Filter reports", [
          filterSelect("report-status", "Status", ["open", "resolved", "dismissed"], filters.status, "status"),
          filterSelect("report-target", "Target", ["message", "user", "group"], filters.target_type, "target_type"),
          filterSelect("report-reason", "Reason", ["spam", "abuse", "sexual", "violence", "illegal", "other", "automod"], filters.reason, "reason"),
          field("report-user", "Reported user id", { value: filters.user_id, "data-field": "user_id" }),
        ], "Filter", async (values) => {
          const previous = filters;
          filters = { status: values["report-status"], target_type: values["report-target"], reason: values["report-reason"], user_id: values["report-user"].trim() };
          selected = undefined;
          fill(detail);
          keep();
          await reverting(() => { filters = previous; keep(); }, queue.first);
        }),
        queue.element, detail,
        form("File a report", [
          field("new-report-reporter", "Reporter user id", { "data-field": "reporter_id" }),
          select("new-report-type", "Target type", ["message", "user", "group"], "user"),
          field("new-report-target", "Target id (message, user or group)", { required: true, "data-field": "target" }),
          select("new-report-reason", "Reason", ["spam", "abuse", "sexual", "violence", "illegal", "other"], "spam"),
          field("new-report-comment", "Comment", { "data-field": "comment" }),
        ], "File report", async (values, element) => {
          const type = values["new-report-type"];
          const body = { reporter_id: values["new-report-reporter"] || undefined, reason: values["new-report-reason"],
            comment: values["new-report-comment"] || undefined, target: { type, [`${type}_id`]: values["new-report-target"].trim() } };
          const report = await api("POST", "/v1/reports", { body });
          element.reset();
          await queue.first();
          notify(`Report ${report.report_id} filed.`);
        })),
      section("Moderation log",
        form("Filter the log", [
          field("log-user-id", "User id", { value: logFilters.log_user, "data-field": "user_id" }),
          field("log-action", "Action", { value: logFilters.log_action, "data-field": "action" }),
          field("log-moderator", "Moderator", { value: logFilters.log_moderator, "data-field": "moderator" }),
          field("log-from", "From", { type: "datetime-local", value: localInput(logFilters.log_from), "data-field": "from" }),
          field("log-to", "To", { type: "datetime-local", value: localInput(logFilters.log_to), "data-field": "to" }),
        ], "Filter", async (values) => {
          const previous = logFilters;
          logFilters = { log_user: values["log-user-id"].trim(), log_action: values["log-action"].trim(), log_moderator: values["log-moderator"].trim(),
            log_from: ms(values["log-from"]) ?? "", log_to: ms(values["log-to"]) ?? "" };
          keep();
          await reverting(() => { logFilters = previous; keep(); }, log.first);
        }),
        log.element),
      section("Remove a user's messages",
        h("p", { class: "muted" }, "Starts a remove_messages job; a dry run (the default) only counts. Follow it on the Jobs screen."),
        form("Remove messages", [
          field("remove-user", "User id", { required: true, "data-field": "user_id" }),
          field("remove-from", "From", { type: "datetime-local", "data-field": "from" }),
          field("remove-to", "To", { type: "datetime-local", "data-field": "to" }),
          filterSelect("remove-conv-type", "Only one conversation of type", ["peer", "group", "room"], "", "conversation_type"),
          field("remove-conv-id", "Conversation id", { "data-field": "conversation_id" }),
          select("remove-mode", "Mode", ["delete", "hide"], "delete"),
          checkbox("remove-dry-run", "Dry run (count only)", true, { "data-field": "dry_run" }),
        ], "Start job", async (values, element) => {
          const dryRun = element.querySelector("#remove-dry-run").checked;
          const body = { user_id: values["remove-user"].trim(), from: ms(values["remove-from"]) ?? 0,
            to: ms(values["remove-to"]) ?? Date.now() + 60_000, mode: values["remove-mode"], dry_run: dryRun,
            conversation_type: values["remove-conv-type"] || undefined, conversation_id: values["remove-conv-id"] || undefined };
          if (!dryRun && !await confirmDestructive(`${body.mode === "delete" ? "Delete" : "Hide"} the messages of ${body.user_id}?`, body.user_id)) return;
          const job = await api("POST", "/v1/moderation/remove_messages", { body });
          fill(jobResult, h("p", {}, `Job ${job.job_id} ${job.state}: `, h("a", { href: `#jobs?job=${encodeURIComponent(job.job_id)}` }, "follow it on the Jobs screen")));
        }),
        jobResult));
    await Promise.all([queue.first(), log.first()]);
    if (selected) await review(selected);
  }

  // MARK: - Blocklists

  const APPLIES_TO = ["text", "custom", "file_name", "user_profile", "group_profile"];

  function appliesTo(prefix, chosen) {
    return h("fieldset", { class: "checks" }, h("legend", {}, "Applies to"),
      APPLIES_TO.map((name) => checkbox(`${prefix}-applies-${name}`, name, chosen.includes(name), { "data-field": "applies_to" })));
  }

  function chosenAppliesTo(prefix, element) {
    return APPLIES_TO.filter((name) => element.querySelector(`#${prefix}-applies-${name}`).checked);
  }

  async function blocklists(main, params) {
    main.append(screenHeading("Blocklists"));
    let selected = params.get("list") || undefined;
    const keep = () => setScreenParams({ list: selected });
    const detail = h("section", { "aria-label": "Selected blocklist" });
    const testResult = h("div", { role: "status" });
    const lists = pagedList(
      (cursor) => api("GET", "/v1/blocklists", { query: { cursor } }),
      (items) => wideTable(
        [["name", "Name", code], ["type", "Type"], ["action", "Action"], ["applies_to", "Applies to", list], ["entry_count", "Entries"],
          ["updated_at", "Updated", time]],
        items,
        (item) => [
          rowButton("Open", `Open blocklist ${item.name}`, () => guarded(() => open(item.name)), "secondary"),
          rowButton("Delete", `Delete blocklist ${item.name}`, () => guarded(() => remove(item.name)), "danger"),
        ], "Blocklists"),
      "No blocklists. Create one above to block, hide, mask or flag content by words, patterns, domains or addresses.");

    async function remove(name) {
      if (!await confirmDestructive(`Delete blocklist ${name}? Its entries stop applying at once.`, name)) return;
      await api("DELETE", path("/v1/blocklists/{name}", name));
      notify(`Blocklist ${name} deleted.`);
      if (selected === name) {
        selected = undefined;
        fill(detail);
      }
      keep();
      await lists.first();
    }

    async function saveEntries(name, entries) {
      await api("PATCH", path("/v1/blocklists/{name}", name), { body: { entries } });
      await Promise.all([lists.first(), open(name)]);
    }

    async function open(name) {
      const item = await api("GET", path("/v1/blocklists/{name}", name));
      selected = name;
      keep();
      fill(detail, 
        h("h3", {}, "Blocklist ", h("code", {}, name)),
        form("Edit blocklist", [
          select("bl-edit-type", "Type", ["word", "regex", "domain", "email"], item.type),
          select("bl-edit-action", "Action", ["block", "shadow_block", "mask", "flag"], item.action),
          appliesTo("bl-edit", item.applies_to),
          textarea("bl-edit-entries", "Entries (one per line; replaces them all)", item.entries.join("\n"), { "data-field": "entries" }),
        ], "Save", async (values, element) => {
          await api("PATCH", path("/v1/blocklists/{name}", name), { body: {
            type: values["bl-edit-type"], action: values["bl-edit-action"], applies_to: chosenAppliesTo("bl-edit", element),
            entries: String(values["bl-edit-entries"]).split("\n").map((s) => s.trim()).filter(Boolean) } });
          await Promise.all([lists.first(), open(name)]);
          notify(`Blocklist ${name} saved.`);
        }),
        h("h4", {}, `Entries (${item.entry_count}, as stored: normalised)`),
        wideTable([["entry", "Entry", code]], item.entries.map((entry) => ({ entry })),
          (row) => [rowButton("Remove", `Remove entry ${row.entry}`, () => guarded(async () => {
            if (item.entries.length === 1) throw new Problem(400, { title: "a list keeps at least one entry", detail: "Delete the list instead." });
            if (!await confirmDestructive(`Remove “${row.entry}” from ${name}?`)) return;
            await saveEntries(name, item.entries.filter((e) => e !== row.entry));
            notify(`Entry removed from ${name}.`);
          }), "danger")], "Entries"),
        form("Add an entry", [field("bl-add-entry", "Entry", { required: true, "data-field": "entries" })], "Add entry", async (values) => {
          await saveEntries(name, [...item.entries, values["bl-add-entry"]]);
          notify(`Entry added to ${name}.`);
        }),
        h("p", {}, rowButton("Delete this blocklist", `Delete blocklist ${name}`, () => guarded(() => remove(name)), "danger")));
      for (const [id, key] of [["bl-edit-type", "type"], ["bl-edit-action", "action"]]) detail.querySelector(`#${id}`).dataset.field = key;
      focusHeading(detail);
    }

    main.append(
      form("New blocklist", [
        field("bl-name", "Name", { required: true, "data-field": "name" }),
        select("bl-type", "Type", ["word", "regex", "domain", "email"], "word"),
        select("bl-action", "Action", ["block", "shadow_block", "mask", "flag"], "block"),
        appliesTo("bl-new", ["text", "custom"]),
        textarea("bl-entries", "Entries (one per line)", "", { "data-field": "entries" }),
      ], "Create blocklist", async (values, element) => {
        const created = await api("POST", "/v1/blocklists", { body: {
          name: values["bl-name"], type: values["bl-type"], action: values["bl-action"], applies_to: chosenAppliesTo("bl-new", element),
          entries: String(values["bl-entries"]).split("\n").map((s) => s.trim()).filter(Boolean) } });
        element.reset();
        await lists.first();
        notify(`Blocklist ${created.name} created with ${created.entry_count} entries.`);
      }),
      lists.element, detail,
      section("Try a text",
        form("Test blocklists", [
          textarea("bl-test-text", "Text", "", { required: true, rows: 2, "data-field": "text" }),
          field("bl-test-names", "Only these lists (comma separated; empty: all)", { "data-field": "names" }),
        ], "Test", async (values) => {
          const names = splitList(values["bl-test-names"]);
          const result = await api("POST", "/v1/blocklists/test", { body: { text: values["bl-test-text"], names: names.length ? names : undefined } });
          fill(testResult, 
            h("p", {}, result.action ? `Strongest action: ${result.action}.` : "Nothing matched: the text passes."),
            result.matches.length ? wideTable([["blocklist", "List", code], ["entry", "Entry", code], ["start", "Start byte"], ["end", "End byte"]],
              result.matches, null, "Matches") : null);
        }),
        testResult));
    await lists.first();
    if (selected) await open(selected);
  }

  // MARK: - Retention

  /** Scope fields shared by policies and holds: which ids a scope takes depends on its type. */
  function scopeFields(prefix, types) {
    return [
      select(`${prefix}-scope`, "Scope", types, types[0]),
      field(`${prefix}-scope-id`, "Group, room or user id (one conversation or user)", { "data-field": "scope" }),
      field(`${prefix}-scope-peer`, "Other user (a peer conversation)", { "data-field": "scope.user_ids" }),
    ];
  }

  function scopeBody(prefix, values) {
    const type = values[`${prefix}-scope`];
    const id = (values[`${prefix}-scope-id`] || "").trim();
    const peer = (values[`${prefix}-scope-peer`] || "").trim();
    if (type === "group" && id) return { type, group_id: id };
    if (type === "room" && id) return { type, room_id: id };
    if (type === "peer" && (id || peer)) return { type, user_ids: [id, peer].filter(Boolean) };
    if (type === "user") return { type, user_id: id };
    return { type };
  }

  function scopeText(scope) {
    if (!scope) return "";
    const ids = scope.group_id || scope.room_id || scope.user_id || (scope.user_ids ? scope.user_ids.join(" ↔ ") : "");
    return ids ? `${scope.type} ${ids}` : `every ${scope.type === "app" ? "message of the app" : `${scope.type} conversation`}`;
  }

  async function retention(main) {
    main.append(screenHeading("Retention"));
    const runResult = h("div", { role: "status" });
    const policies = pagedList(
      (cursor) => api("GET", "/v1/retention/policies", { query: { limit: PAGE, cursor } }),
      (items) => wideTable(
        [["policy_id", "Policy", code], ["scope", "Scope", scopeText], ["max_age_days", "Max age (days)"], ["purge_files", "Purge files", yesNo],
          ["updated_at", "Updated", time]],
        items,
        (policy) => [rowButton("Delete", `Delete policy ${policy.policy_id}`, () => guarded(async () => {
          if (!await confirmDestructive(`Delete the policy of ${scopeText(policy.scope)}?`, policy.policy_id)) return;
          await api("DELETE", path("/v1/retention/policies/{policy_id}", policy.policy_id));
          await policies.first();
          notify(`Policy ${policy.policy_id} deleted.`);
        }), "danger")], "Retention policies"),
      "No policies: messages are kept as the app setting history_retention_days says (0 = forever). Add one above.");
    const holds = pagedList(
      (cursor) => api("GET", "/v1/retention/holds", { query: { limit: PAGE, cursor } }),
      (items) => wideTable(
        [["hold_id", "Hold", code], ["scope", "Scope", scopeText], ["reason", "Reason"], ["created_at", "Placed", time]],
        items,
        (hold) => [rowButton("Release", `Release hold ${hold.hold_id}`, () => guarded(async () => {
          if (!await confirmDestructive(`Release the hold on ${scopeText(hold.scope)}? Its messages can be purged again.`, hold.hold_id)) return;
          await api("DELETE", path("/v1/retention/holds/{hold_id}", hold.hold_id));
          await holds.first();
          notify(`Hold ${hold.hold_id} released.`);
        }), "danger")], "Legal holds"),
      "No legal holds.");
    const runs = pagedList(
      (cursor) => api("GET", "/v1/retention/runs", { query: { limit: PAGE, cursor } }),
      (items) => wideTable(
        [["run_id", "Run", code], ["dry_run", "Dry run", yesNo], ["started_at", "Started", time], ["finished_at", "Finished", time],
          ["messages_purged", "Messages"], ["files_purged", "Files"], ["held_skipped", "Held"], ["error", "Error"]],
        items, null, "Retention runs"),
      "No runs yet. Runs start hourly for apps with a policy, or now with the button above.");

    main.append(
      section("Policies",
        form("Set a policy", [
          ...scopeFields("policy", ["app", "peer", "group", "room"]),
          field("policy-days", "Max age (days, 1–3650)", { type: "number", required: true, "data-field": "max_age_days" }),
          checkbox("policy-purge-files", "Also delete the files only purged messages named", true, { "data-field": "purge_files" }),
        ], "Save policy", async (values, element) => {
          const policy = await api("POST", "/v1/retention/policies", { body: {
            scope: scopeBody("policy", values), max_age_days: int(values["policy-days"]),
            purge_files: element.querySelector("#policy-purge-files").checked } });
          await policies.first();
          notify(`Policy ${policy.policy_id} saved for ${scopeText(policy.scope)}.`);
        }),
        policies.element),
      section("Legal holds",
        form("Place a hold", [
          ...scopeFields("hold", ["user", "peer", "group", "room"]),
          field("hold-reason", "Reason", { "data-field": "reason" }),
        ], "Place hold", async (values, element) => {
          const hold = await api("POST", "/v1/retention/holds", { body: { scope: scopeBody("hold", values), reason: values["hold-reason"] || undefined } });
          element.reset();
          await holds.first();
          notify(`Hold ${hold.hold_id} placed on ${scopeText(hold.scope)}.`);
        }),
        holds.element),
      section("Runs",
        h("p", { class: "toolbar" },
          button("Dry run now", () => guarded(async () => {
            const run = await api("POST", "/v1/retention/runs", { body: { dry_run: true } });
            fill(runResult, h("p", {}, `A run now would purge ${run.messages_purged} messages and ${run.files_purged} files (${run.held_skipped} held).`));
            await runs.first();
          }), "secondary"),
          button("Purge now", () => guarded(async () => {
            if (!await confirmDestructive("Run every policy now? Purged messages cannot be read again.")) return;
            const run = await api("POST", "/v1/retention/runs", { body: { dry_run: false } });
            fill(runResult, h("p", {}, `Run ${run.run_id} started.`));
            await runs.first();
          }), "danger")),
        runResult, runs.element));
    await Promise.all([policies.first(), holds.first(), runs.first()]);
  }

  // MARK: - Jobs

  async function jobs(main, params) {
    main.append(screenHeading("Jobs"));
    let filters = { kind: params.get("kind") || "", state: params.get("state") || "" };
    let selected = params.get("job") || undefined;
    const keep = () => setScreenParams({ ...filters, job: selected });
    const detail = h("section", { "aria-label": "Selected job" });
    const progress = (p) => (p ? `${p.done ?? 0}${p.total !== null && p.total !== undefined ? ` / ${p.total}` : ""}` : "");
    const jobList = pagedList(
      (cursor) => api("GET", "/v1/jobs", { query: { ...filters, limit: PAGE, cursor } }),
      (items) => wideTable(
        [["job_id", "Job", code], ["kind", "Kind"], ["state", "State"], ["progress", "Progress", progress], ["created_at", "Created", time],
          ["finished_at", "Finished", time]],
        items,
        (job) => [
          rowButton("Inspect", `Inspect job ${job.job_id}`, () => guarded(() => inspect(job.job_id)), "secondary"),
          ["queued", "running"].includes(job.state) ? rowButton("Cancel", `Cancel job ${job.job_id}`, () => guarded(() => cancel(job.job_id)), "danger") : null,
        ], "Jobs"),
      "No jobs match. Jobs are started by long operations such as removing a user's messages (Moderation screen).");

    async function cancel(jobID) {
      if (!await confirmDestructive(`Cancel job ${jobID}? What its finished steps did stays done.`)) return;
      const job = await api("DELETE", path("/v1/jobs/{job_id}", jobID));
      await Promise.all([jobList.first(), inspect(jobID)]);
      notify(`Job ${jobID} ${job && job.state === "cancelled" ? "cancelled" : "asked to stop"}.`);
    }

    async function inspect(jobID) {
      const job = await api("GET", path("/v1/jobs/{job_id}", jobID));
      selected = jobID;
      keep();
      fill(detail, 
        h("h3", {}, "Job ", h("code", {}, jobID)),
        job.progress && job.progress.total ? h("progress", { max: job.progress.total, value: Math.min(job.progress.done, job.progress.total),
          "aria-label": `Progress of job ${jobID}` }) : null,
        describe(job, { progress }),
        h("p", { class: "toolbar" },
          button("Refresh", () => guarded(() => inspect(jobID)), "secondary"),
          ["queued", "running"].includes(job.state) ? rowButton("Cancel job", `Cancel job ${jobID}`, () => guarded(() => cancel(jobID)), "danger") : null));
      focusHeading(detail);
    }

    main.append(
      form("Filter jobs", [
        field("job-kind", "Kind", { value: filters.kind, "data-field": "kind" }),
        filterSelect("job-state", "State", ["queued", "running", "succeeded", "failed", "cancelled"], filters.state, "state"),
      ], "Filter", async (values) => {
        const previous = filters;
        filters = { kind: values["job-kind"].trim(), state: values["job-state"] };
        selected = undefined;
        fill(detail);
        keep();
        await reverting(() => { filters = previous; keep(); }, jobList.first);
      }),
      jobList.element, detail);
    await jobList.first();
    if (selected) await inspect(selected);
  }

  registerScreen("rooms", "Rooms", rooms);
  registerScreen("calls", "Calls", calls);
  registerScreen("webhooks", "Webhooks", webhooks);
  registerScreen("push", "Push", push);
  registerScreen("eventlog", "Event log", eventlog);
  registerScreen("files", "Files", files);
  registerScreen("moderation", "Moderation", moderation);
  registerScreen("blocklists", "Blocklists", blocklists);
  registerScreen("retention", "Retention", retention);
  registerScreen("jobs", "Jobs", jobs);
})();
