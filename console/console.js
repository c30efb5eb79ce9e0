// Parley admin console: plain JavaScript over the public API of the same origin. No framework, no build step.
"use strict";

// The credential lives in sessionStorage only: it is gone when the tab closes and never appears in a URL.
const STORAGE = {
  credential: "parley.console.credential",
  actingApp: "parley.console.actingApp",
  lastEventId: "parley.console.lastEventId",
  eventLog: "parley.console.eventLog",
};
// What the live panel keeps across reloads; older events drop off the top.
const PANEL_LIMIT = 200;

// MARK: - DOM helpers

/** An element with attributes (`on…` keys become listeners) and children (strings become text, never HTML). */
function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (value === true) element.setAttribute(name, "");
    else element.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

const $ = (id) => document.getElementById(id);

/** A labelled input; `id` must be unique on the page. */
function field(id, label, attributes = {}) {
  return h("label", { for: id }, label, h("input", { id, name: id, ...attributes }));
}

function select(id, label, options, selected) {
  return h("label", { for: id }, label,
    h("select", { id, name: id }, options.map((value) => h("option", { value, selected: value === selected }, value))));
}

function button(text, onclick, className) {
  return h("button", { type: "button", class: className, onclick }, text);
}

/** A form whose submit runs `action` with its values; problems are shown, the page never navigates. */
function form(label, children, submitText, action) {
  const element = h("form", { "aria-label": label }, children, h("button", { type: "submit" }, submitText));
  element.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = Object.fromEntries(new FormData(element).entries());
    guarded(() => action(values, element));
  });
  return element;
}

function formatTime(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms === -1) return "forever";
  if (ms === 0) return "no";
  return new Date(ms).toLocaleString();
}

function table(columns, rows, actions) {
  return h("table", {},
    h("thead", {}, h("tr", {}, columns.map(([, title]) => h("th", { scope: "col" }, title)), actions ? h("th", { scope: "col" }, "Actions") : null)),
    h("tbody", {}, rows.map((row) => h("tr", {},
      columns.map(([key, , format]) => h("td", {}, format ? format(row[key], row) : row[key] ?? "")),
      actions ? h("td", { class: "actions" }, actions(row)) : null))));
}

// MARK: - Message bodies

function formatBytes(bytes) {
  if (typeof bytes !== "number") return "";
  const units = ["B", "KiB", "MiB", "GiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

/** A message body as its kind: text, an image's thumbnail linking to the image, a file's link, players for audio and
 * video (their URLs are signed download URLs the API answers, see docs/files.md), the items of a multiple message. */
function messageContent(message) {
  if (message.deleted) return h("span", { class: "muted" }, "(deleted for everyone)");
  const content = bodyContent(message.type, message.body || {});
  if (!message.suppressed) return content;
  return h("div", {}, content, h("span", { class: "muted" }, ` (suppressed: ${message.suppressed}; delivered to nobody)`));
}

function bodyContent(type, body) {
  const name = body.file_name || "file";
  switch (type) {
    case 1: case 20: return h("span", {}, body.text);
    case 11: {
      const src = body.thumbnail_url || body.url;
      return h("a", { href: body.url, target: "_blank", rel: "noopener", class: "media" },
        h("img", { src, alt: name, width: body.thumbnail_width || undefined, height: body.thumbnail_height || undefined, loading: "lazy" }));
    }
    case 12: return h("a", { href: body.url, download: name, class: "media" }, `File: ${name} (${formatBytes(body.file_size)})`);
    case 13: return h("div", { class: "media" }, h("audio", { controls: true, preload: "none", src: body.url }), h("div", { class: "muted" }, name));
    case 14: return h("div", { class: "media" },
      h("video", { controls: true, preload: "none", src: body.url, poster: body.first_frame_url || undefined,
        width: body.first_frame_width || undefined }),
      h("div", { class: "muted" }, name));
    case 10: return h("div", {}, (body.items || []).map((item) => h("div", {}, bodyContent(item.type, item.body || {}))));
    case 31: return h("span", { class: "muted" }, "(revoked)");
    case 32: return h("span", { class: "muted" }, `(${body.event || "notice"})`);
    case 200: return h("span", {}, h("span", { class: "muted" }, `custom ${body.sub_type}: `), body.data);
    default: return h("span", { class: "muted" }, `[type ${type}]`);
  }
}

// MARK: - Messages to the operator

/** An RFC 9457 problem (or any failed call) in words: title, status, code, detail, field errors, request id. */
class Problem extends Error {
  constructor(status, body) {
    const problem = typeof body === "object" && body !== null ? body : { title: `HTTP ${status}`, detail: String(body || "") };
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

function showProblem(error) {
  const box = $("problem");
  box.replaceChildren();
  if (error instanceof Problem) {
    const p = error.problem;
    box.append(...[
      h("h2", {}, `${p.title || "error"} (HTTP ${error.status}${p.code ? `, code ${p.code}` : ""})`),
      p.detail ? h("p", {}, p.detail) : null,
      Array.isArray(p.errors) && p.errors.length
        ? h("ul", {}, p.errors.map((e) => h("li", {}, h("code", {}, e.field), ": ", e.message)))
        : null,
      p.request_id ? h("p", { class: "muted" }, "Request id ", h("code", {}, p.request_id)) : null,
    ].filter(Boolean));
  } else {
    box.append(h("h2", {}, "The request failed"), h("p", {}, error && error.message ? error.message : String(error)));
  }
  box.hidden = false;
}

function clearMessages() {
  $("problem").hidden = true;
  $("notice").hidden = true;
}

function notify(...children) {
  const box = $("notice");
  box.replaceChildren(...children);
  box.hidden = false;
}

/** Runs an action and shows what went wrong instead of leaving an unhandled rejection. */
async function guarded(action) {
  clearMessages();
  try {
    await action();
  } catch (error) {
    showProblem(error);
  }
}

// MARK: - Credential and API calls

const session = {
  get credential() { return sessionStorage.getItem(STORAGE.credential); },
  /** App keys have the form `pk.<app_id>.<secret>`; any other accepted value is the server admin key. */
  get isAdmin() { return this.credential !== null && !this.credential.startsWith("pk."); },
  get appID() {
    const credential = this.credential;
    if (credential === null) return null;
    return this.isAdmin ? sessionStorage.getItem(STORAGE.actingApp) : credential.split(".")[1];
  },
};

/** Authorization, and for the admin key on app routes the app it acts for (API §1.3). */
function authHeaders(path) {
  const headers = { Authorization: `Bearer ${session.credential}` };
  if (session.isAdmin && session.appID && !path.startsWith("/v1/apps")) headers["Parley-App-Id"] = session.appID;
  return headers;
}

function queryString(query) {
  const pairs = Object.entries(query || {}).filter(([, v]) => v !== undefined && v !== null && v !== "");
  return pairs.length ? "?" + new URLSearchParams(pairs).toString() : "";
}

async function api(method, path, { query, body, credential = true } = {}) {
  const headers = credential ? authHeaders(path) : {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path + queryString(query), {
    method, headers, cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return null;
  const type = response.headers.get("Content-Type") || "";
  const data = type.includes("json") ? await response.json() : await response.text();
  if (!response.ok) throw new Problem(response.status, data);
  return data;
}

const path = (template, ...ids) => {
  let i = 0;
  return template.replace(/\{[^}]+\}/g, () => encodeURIComponent(ids[i++]));
};

// MARK: - Live events (SSE over fetch)

// EventSource cannot send an Authorization header, and the API's alternative, `?access_token=`, would put the admin or
// app key into URLs that proxies and access logs record. fetch() sends the header, and its streamed body is parsed
// here as text/event-stream. Resume is ours: the last id seen is kept in sessionStorage and sent as Last-Event-ID, so a
// reconnect or a page reload continues exactly after it (the server sends each later event once, in id order).
const live = {
  controller: null,
  ids: new Set(),

  start() {
    this.stop();
    if (!session.appID) {
      this.status("Not connected: choose the app to act for on the Apps screen.");
      return;
    }
    this.controller = new AbortController();
    this.run(this.controller.signal);
  },

  stop() {
    if (this.controller) this.controller.abort();
    this.controller = null;
  },

  status(text) { $("live-status").textContent = text; },

  get lastEventId() { return sessionStorage.getItem(STORAGE.lastEventId); },

  async run(signal) {
    let delay = 1000;
    while (!signal.aborted) {
      const resumeFrom = this.lastEventId;
      try {
        const headers = authHeaders("/v1/events");
        if (resumeFrom !== null) headers["Last-Event-ID"] = resumeFrom;
        const response = await fetch("/v1/events", { headers, signal, cache: "no-store" });
        if (!response.ok) {
          const problem = new Problem(response.status, await response.json().catch(() => null));
          // A resume id beyond the log's head means the log is not the one we read (a reset database): start afresh.
          if (problem.problem.code === 7000012) {
            sessionStorage.removeItem(STORAGE.lastEventId);
            continue;
          }
          if (response.status === 401 || response.status === 403 || response.status === 400) {
            this.status(`Not connected: ${problem.problem.title || response.status} — ${problem.message}`);
            return;
          }
          throw problem;
        }
        const start = response.headers.get("Parley-Last-Event-ID");
        if (resumeFrom !== null && start !== null && start !== resumeFrom) {
          this.append({ gap: true, id: start, text: `Events after ${resumeFrom} up to ${start} were trimmed from the log.` });
        }
        this.status(resumeFrom === null ? "Connected: new events appear below." : `Connected: resumed after event ${resumeFrom}.`);
        delay = 1000;
        await this.read(response.body, signal);
        if (!signal.aborted) this.status("The stream closed; reconnecting…");
      } catch (error) {
        if (signal.aborted) return;
        this.status(`Disconnected (${error.message}); reconnecting in ${delay / 1000} s…`);
      }
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, delay);
        signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
      });
      delay = Math.min(delay * 2, 10000);
    }
  },

  /** Parses text/event-stream frames (WHATWG HTML §9.2) from a fetch body. */
  async read(body, signal) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let frame = { id: null, event: "message", data: [] };
    try {
      while (true) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += value;
        const lines = buffer.split(/\r\n|\r|\n/);
        buffer = lines.pop();
        for (const line of lines) {
          if (line === "") {
            if (frame.data.length) this.deliver(frame);
            frame = { id: null, event: "message", data: [] };
            continue;
          }
          if (line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const name = colon < 0 ? line : line.slice(0, colon);
          const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (name === "id") frame.id = value;
          else if (name === "event") frame.event = value;
          else if (name === "data") frame.data.push(value);
        }
      }
    } finally {
      if (signal.aborted) reader.cancel().catch(() => {});
    }
  },

  deliver(frame) {
    const last = this.lastEventId;
    // Never show an event twice: ids only grow, so anything at or below the last one shown was shown.
    if (frame.id !== null && last !== null && BigInt(frame.id) <= BigInt(last)) return;
    let event;
    try {
      event = JSON.parse(frame.data.join("\n"));
    } catch {
      event = { id: frame.id, type: frame.event, data: frame.data.join("\n") };
    }
    const entry = { id: frame.id ?? event.id, type: event.type || frame.event, text: summarize(event) };
    this.append(entry);
    if (frame.id !== null) sessionStorage.setItem(STORAGE.lastEventId, frame.id);
  },

  append(entry) {
    const log = this.saved();
    log.push(entry);
    sessionStorage.setItem(STORAGE.eventLog, JSON.stringify(log.slice(-PANEL_LIMIT)));
    this.render(entry);
  },

  saved() {
    try {
      return JSON.parse(sessionStorage.getItem(STORAGE.eventLog) || "[]");
    } catch {
      return [];
    }
  },

  render(entry) {
    const list = $("event-list");
    const item = entry.gap
      ? h("li", { class: "gap" }, entry.text)
      : h("li", { "data-event-id": entry.id },
        h("span", { class: "event-id" }, `#${entry.id}`), h("span", { class: "event-type" }, entry.type), " ", entry.text);
    list.append(item);
    while (list.children.length > PANEL_LIMIT) list.firstElementChild.remove();
    list.scrollTop = list.scrollHeight;
  },

  /** After a reload: the events shown before it, then the stream resumes after the last of them. */
  restore() {
    $("event-list").replaceChildren();
    for (const entry of this.saved()) this.render(entry);
  },

  clear() {
    sessionStorage.setItem(STORAGE.eventLog, "[]");
    $("event-list").replaceChildren();
  },
};

/** One line about an event: the message text and its parties when there is one, else the data's ids. */
function summarize(event) {
  const data = event.data || {};
  const message = data.message || (data.body ? data : null);
  if (message && message.body) {
    const text = message.body.text !== undefined ? `“${message.body.text}”` : `type ${message.type}`;
    return `${message.from} → ${message.conversation_type} ${message.to || ""}: ${text}`;
  }
  const ids = ["user_id", "group_id", "room_id", "call_id", "operator"]
    .map((key) => data[key] ?? data.user?.[key] ?? data.group?.[key])
    .filter((value) => typeof value === "string");
  return ids.join(", ");
}

// MARK: - Shared by every screen script (console.js, and the scripts index.html loads after it)

/** Adds a screen and its link in the navigation; the other scripts of the console register theirs with this. Scripts
 * load deferred, in order, and the first screen is drawn at DOMContentLoaded, after all of them registered. */
function registerScreen(name, title, render, { adminOnly = false } = {}) {
  screens[name] = render;
  if (document.querySelector(`#nav a[data-screen="${name}"]`)) return;
  $("nav").append(h("a", { href: `#${name}`, "data-screen": name, "data-admin-only": adminOnly }, title));
}

/** Keeps a screen's state (selected item, filters) in the URL so a link to it can be shared: replaces the query part of
 * the hash without drawing the screen again. Never put a credential here. */
function setScreenParams(values) {
  const [name] = location.hash.slice(1).split("?");
  const query = queryString(values);
  history.replaceState(null, "", `#${name}${query}`);
}

/** Asks before a destructive action. With `typeToConfirm` (deletes), the operator must type that id; resolves to
 * whether to go on. A modal <dialog>: focus stays in it, Escape cancels. */
function confirmDestructive(question, typeToConfirm) {
  return new Promise((resolve) => {
    const input = typeToConfirm === undefined ? null
      : h("input", { id: "confirm-typed", name: "confirm-typed", autocomplete: "off", spellcheck: "false" });
    const confirmButton = h("button", { type: "submit", class: "danger", disabled: input !== null }, "Confirm");
    const cancelButton = h("button", { type: "button", class: "secondary" }, "Cancel");
    const dialog = h("dialog", { "aria-labelledby": "confirm-question", class: "confirm" },
      h("form", { method: "dialog" },
        h("p", { id: "confirm-question" }, question),
        input ? h("label", { for: "confirm-typed" }, "Type ", h("code", {}, typeToConfirm), " to confirm", input) : null,
        h("p", { class: "actions" }, confirmButton, " ", cancelButton)));
    if (input) input.addEventListener("input", () => { confirmButton.disabled = input.value !== typeToConfirm; });
    let answer = false;
    confirmButton.addEventListener("click", () => { answer = input === null || input.value === typeToConfirm; });
    cancelButton.addEventListener("click", () => dialog.close());
    dialog.addEventListener("close", () => { dialog.remove(); resolve(answer); });
    document.body.append(dialog);
    dialog.showModal();
    (input || cancelButton).focus();
  });
}

// MARK: - Screens

function screenHeading(text) {
  return h("h2", { id: "screen-title" }, text);
}

/** A list with a "Load more" button that follows `next_cursor` (API §1.5). */
function pagedList(load, renderRows) {
  const container = h("div", {});
  const more = button("Load more", () => guarded(() => next()), "secondary");
  more.hidden = true;
  let cursor = null;
  async function next() {
    const page = await load(cursor);
    container.append(renderRows(page.items || []));
    cursor = page.next_cursor || null;
    more.hidden = cursor === null;
  }
  return { element: h("div", {}, container, more), first: () => { container.replaceChildren(); cursor = null; return next(); } };
}

const screens = {
  async apps(main) {
    main.append(screenHeading("Apps and keys"));
    if (!session.isAdmin) {
      main.append(h("p", {}, "Apps and keys are managed with the server admin key. You are signed in with the key of app ",
        h("code", {}, session.appID), "."));
      return;
    }
    const keys = h("section", { "aria-label": "Keys of the selected app" });
    const list = pagedList(
      (cursor) => api("GET", "/v1/apps", { query: { limit: 20, cursor } }),
      (apps) => table(
        [["app_id", "App id", (v) => h("code", {}, v)], ["name", "Name"], ["created_at", "Created", formatTime]],
        apps,
        (app) => [
          button(app.app_id === session.appID ? "Acting for this app" : "Act for this app", () => {
            sessionStorage.setItem(STORAGE.actingApp, app.app_id);
            sessionStorage.removeItem(STORAGE.lastEventId);
            live.clear();
            refreshChrome();
            live.start();
            route();
          }, app.app_id === session.appID ? "secondary" : undefined),
          button("Keys", () => guarded(() => showKeys(app.app_id)), "secondary"),
        ]));

    async function showKeys(appID) {
      const page = await api("GET", path("/v1/apps/{app_id}/keys", appID));
      keys.replaceChildren(
        h("h3", {}, "Keys of ", h("code", {}, appID)),
        table(
          [["key_id", "Key id", (v) => h("code", {}, v)], ["name", "Name"], ["prefix", "Prefix", (v) => h("code", {}, v)],
            ["last_used_at", "Last used", formatTime], ["revoked_at", "Revoked", formatTime]],
          page.items,
          (key) => key.revoked_at ? [] : [button("Revoke", () => guarded(async () => {
            await api("DELETE", path("/v1/apps/{app_id}/keys/{key_id}", appID, key.key_id));
            await showKeys(appID);
          }), "danger")]),
        form("New key", [field("key-name", "Key name", { required: true, maxlength: 64 })], "Create key", async (values) => {
          const key = await api("POST", path("/v1/apps/{app_id}/keys", appID), { body: { name: values["key-name"] } });
          await showKeys(appID);
          notify(h("p", { class: "secret" }, "New key (shown only now): ", h("code", {}, key.secret)));
        }));
      keys.querySelector("h3").setAttribute("tabindex", "-1");
      keys.querySelector("h3").focus();
    }

    main.append(
      form("New app", [field("app-id", "App id (optional)"), field("app-name", "Name", { required: true })], "Create app",
        async (values) => {
          const body = { name: values["app-name"] };
          if (values["app-id"]) body.app_id = values["app-id"];
          const created = await api("POST", "/v1/apps", { body });
          await list.first();
          notify(h("p", { class: "secret" }, `App ${created.app.app_id} created. Its key (shown only now): `,
            h("code", {}, created.key.secret)));
        }),
      list.element, keys);
    await list.first();
  },

  async users(main) {
    main.append(screenHeading("Users"));
    const detail = h("section", { "aria-label": "Selected user" });
    let search = { q: "", state: "active" };
    const list = pagedList(
      (cursor) => api("GET", "/v1/users", { query: { ...search, limit: 20, cursor } }),
      (users) => table(
        [["user_id", "User id", (v) => h("code", {}, v)], ["name", "Name"], ["muted_until", "Muted", formatTime],
          ["banned_until", "Banned", formatTime], ["created_at", "Created", formatTime]],
        users,
        (user) => [button("Manage", () => guarded(() => manage(user.user_id)), "secondary")]));

    async function manage(userID) {
      const user = await api("GET", path("/v1/users/{user_id}", userID));
      const result = h("div", { role: "status" });
      detail.replaceChildren(
        h("h3", { tabindex: "-1" }, "User ", h("code", {}, user.user_id)),
        h("p", { class: "muted" }, `Muted: ${formatTime(user.muted_until)} · banned: ${formatTime(user.banned_until)}`),
        form("Edit user", [
          field("edit-name", "Name", { value: user.name }),
          field("edit-avatar", "Avatar URL", { value: user.avatar_url }),
          field("edit-extended", "Extended data", { value: user.extended_data }),
        ], "Save", async (values) => {
          await api("PATCH", path("/v1/users/{user_id}", userID), {
            body: { name: values["edit-name"], avatar_url: values["edit-avatar"], extended_data: values["edit-extended"] },
          });
          await Promise.all([list.first(), manage(userID)]);
          notify(`Saved ${userID}.`);
        }),
        form("Mute user", [
          field("mute-duration", "Mute for (seconds; -1 forever, 0 unmute)", { type: "number", min: -1, value: 3600, required: true }),
        ], "Set mute", async (values) => {
          await api("POST", path("/v1/users/{user_id}/mute", userID), { body: { duration_s: Number(values["mute-duration"]) } });
          await Promise.all([list.first(), manage(userID)]);
          notify(`Mute of ${userID} updated.`);
        }),
        form("Issue a token", [
          field("token-ttl", "Token lifetime (seconds)", { type: "number", min: 60, max: 2592000, value: 3600, required: true }),
        ], "Issue token", async (values) => {
          const token = await api("POST", path("/v1/users/{user_id}/tokens", userID), { body: { ttl_s: Number(values["token-ttl"]) } });
          result.replaceChildren(h("p", { class: "secret" }, `Token for ${userID}, expires ${formatTime(token.expires_at)}: `,
            h("code", {}, token.token)));
        }),
        h("p", {},
          button("Kick (close streams, revoke tokens)", () => guarded(async () => {
            const kicked = await api("POST", path("/v1/users/{user_id}/kick", userID), { body: {} });
            notify(`${userID} kicked: ${kicked.closed_streams} stream(s) closed.`);
          }), "danger"), " ",
          h("a", { href: `#conversation?user=${encodeURIComponent(userID)}` }, "Open a conversation as this user")),
        result);
      detail.querySelector("h3").focus();
    }

    main.append(
      form("New user", [field("new-user-id", "User id", { required: true }), field("new-user-name", "Name")], "Create user",
        async (values, element) => {
          const user = await api("POST", "/v1/users", { body: { user_id: values["new-user-id"], name: values["new-user-name"] } });
          element.reset();
          await list.first();
          notify(`User ${user.user_id} created.`);
        }),
      form("Search users", [
        field("user-q", "Search (id prefix or name)", { type: "search" }),
        select("user-state", "State", ["active", "muted", "banned", "deleted", "all"], "active"),
      ], "Search", async (values) => {
        search = { q: values["user-q"], state: values["user-state"] };
        await list.first();
      }),
      list.element, detail);
    await list.first();
  },

  async groups(main) {
    main.append(screenHeading("Groups"));
    const detail = h("section", { "aria-label": "Selected group" });
    let q = "";
    const list = pagedList(
      (cursor) => api("GET", "/v1/groups", { query: { q, limit: 20, cursor } }),
      (groups) => table(
        [["group_id", "Group id", (v) => h("code", {}, v)], ["name", "Name"], ["owner_id", "Owner"],
          ["member_count", "Members"], ["created_at", "Created", formatTime]],
        groups,
        (group) => [button("Members", () => guarded(() => members(group)), "secondary")]));

    async function members(group) {
      const memberList = pagedList(
        (cursor) => api("GET", path("/v1/groups/{group_id}/members", group.group_id), { query: { limit: 50, cursor } }),
        (items) => table(
          [["user_id", "User id", (v) => h("code", {}, v)], ["name", "Name"], ["role", "Role"], ["nickname", "Nickname"],
            ["joined_at", "Joined", formatTime]],
          items,
          (member) => member.role === 1 ? [] : [button("Remove", () => guarded(async () => {
            await api("POST", path("/v1/groups/{group_id}/members/kick", group.group_id), { body: { user_ids: [member.user_id] } });
            await memberList.first();
          }), "danger")]));
      detail.replaceChildren(
        h("h3", { tabindex: "-1" }, "Members of ", h("code", {}, group.group_id)),
        form("Add members", [field("invite-ids", "User ids (comma separated)", { required: true })], "Add", async (values) => {
          const ids = values["invite-ids"].split(",").map((s) => s.trim()).filter(Boolean);
          const batch = await api("POST", path("/v1/groups/{group_id}/members/invite", group.group_id), { body: { user_ids: ids } });
          await memberList.first();
          const failed = (batch.results || []).filter((r) => r.error);
          if (failed.length) showProblem(new Problem(207, { title: "some users were not added", detail: failed.map((r) => `${r.id}: ${r.error.title}`).join("; ") }));
        }),
        memberList.element,
        h("p", {}, h("a", { href: `#conversation?user=${encodeURIComponent(group.owner_id)}&type=group&id=${encodeURIComponent(group.group_id)}` },
          "Open the group's conversation as its owner")));
      await memberList.first();
      detail.querySelector("h3").focus();
    }

    main.append(
      form("New group", [
        field("group-id", "Group id (optional)"),
        field("group-name", "Name"),
        field("group-owner", "Owner user id", { required: true }),
        field("group-members", "Members (comma separated)"),
      ], "Create group", async (values, element) => {
        const body = {
          name: values["group-name"], operator: values["group-owner"],
          members: values["group-members"].split(",").map((s) => s.trim()).filter(Boolean),
        };
        if (values["group-id"]) body.group_id = values["group-id"];
        const created = await api("POST", "/v1/groups", { body });
        element.reset();
        await list.first();
        notify(`Group ${created.group.group_id} created.`);
      }),
      form("Search groups", [field("group-q", "Search by name", { type: "search" })], "Search", async (values) => {
        q = values["group-q"];
        await list.first();
      }),
      list.element, detail);
    await list.first();
  },

  async conversation(main, params) {
    main.append(screenHeading("Conversation"));
    const history = h("ol", { class: "messages", "aria-label": "Messages, oldest first" });
    const older = button("Older messages", () => guarded(() => loadOlder()), "secondary");
    const view = h("section", { "aria-label": "Conversation" });
    older.hidden = true;
    let current = null;
    let cursor = null;

    const historyPath = () => path("/v1/users/{user_id}/conversations/{type}/{id}/messages", current.user, current.type, current.id);
    function line(message) {
      return h("li", { "data-message-id": message.message_id },
        h("div", { class: "meta" }, `#${message.seq ?? "-"} · ${message.from} · ${formatTime(message.timestamp)}`),
        messageContent(message));
    }
    async function loadOlder() {
      const page = await api("GET", historyPath(), { query: { limit: 20, cursor } });
      // The API pages newest first; the viewer reads oldest first, so each older page goes on top.
      history.prepend(...page.items.slice().reverse().map(line));
      cursor = page.next_cursor || null;
      older.hidden = cursor === null;
    }
    async function open(values) {
      current = values;
      cursor = null;
      history.replaceChildren();
      view.replaceChildren(
        h("h3", { tabindex: "-1" }, `${current.user} ↔ ${current.type} ${current.id}`),
        older, history,
        form("Send a message", [field("send-text", `Text (sent as ${current.user})`, { required: true, autocomplete: "off" })], "Send",
          async (sent, element) => {
            const message = await api("POST", "/v1/messages", {
              body: { from: current.user, conversation_type: current.type, to: current.id, type: 1, body: { text: sent["send-text"] } },
            });
            history.append(line(message));
            element.reset();
            element.querySelector("input").focus();
          }));
      await loadOlder();
      view.querySelector("h3").focus();
    }

    main.append(
      form("Open a conversation", [
        field("conv-user", "As user", { required: true, value: params.get("user") || "" }),
        select("conv-type", "Type", ["peer", "group"], params.get("type") || "peer"),
        field("conv-id", "With (user id or group id)", { required: true, value: params.get("id") || "" }),
      ], "Open", (values) => open({ user: values["conv-user"], type: values["conv-type"], id: values["conv-id"] })),
      view);
    if (params.get("user") && params.get("id")) await open({ user: params.get("user"), type: params.get("type") || "peer", id: params.get("id") });
  },

  async stats(main) {
    main.append(screenHeading("Stats and health"));
    const body = h("div", {});
    async function refresh() {
      const [health, ready, stats] = await Promise.all([
        probe("/healthz"), probe("/readyz"),
        session.appID ? api("GET", "/v1/stats").catch((error) => error) : Promise.resolve(null),
      ]);
      body.replaceChildren(
        h("h3", {}, "Health"),
        h("dl", { class: "stats" },
          h("dt", {}, "Liveness (/healthz)"), h("dd", {}, health),
          h("dt", {}, "Readiness (/readyz)"), h("dd", {}, ready)),
        h("h3", {}, session.appID ? `Statistics of app ${session.appID}` : "Statistics"),
        stats === null ? h("p", {}, "Choose the app to act for on the Apps screen.")
          : stats instanceof Problem ? h("p", {}, `${stats.problem.title}: ${stats.message}`)
            : h("dl", { class: "stats" }, Object.entries(stats).flatMap(([key, value]) => [
              h("dt", {}, key.replaceAll("_", " ")),
              h("dd", {}, key.endsWith("_at") ? formatTime(value) : String(value))])));
    }
    async function probe(url) {
      try {
        const answer = await api("GET", url, { credential: false });
        return `${answer.status}${answer.database ? ` (database ${answer.database})` : ""}`;
      } catch (error) {
        return error instanceof Problem ? `${error.status} ${error.problem.title}: ${error.message}` : error.message;
      }
    }
    main.append(button("Refresh", () => guarded(refresh)), body);
    await refresh();
  },
};

function signIn(main) {
  main.append(
    h("section", { class: "signin" },
      screenHeading("Sign in"),
      h("p", {}, "Use the server admin key (", h("code", {}, "PARLEY_ADMIN_KEY"), ") or an app key (",
        h("code", {}, "pk.<app_id>.…"), "). It is kept in this tab's session storage until you sign out or close the tab."),
      form("Sign in", [field("credential", "Admin key or app key", { type: "password", required: true, autocomplete: "off" })], "Sign in",
        async (values) => {
          const credential = values.credential.trim();
          const isAdmin = !credential.startsWith("pk.");
          // Check the key before keeping it: the admin key may list apps, an app key may read its stats.
          const response = await fetch(isAdmin ? "/v1/apps?limit=1" : "/v1/stats", {
            headers: { Authorization: `Bearer ${credential}` }, cache: "no-store",
          });
          if (!response.ok) throw new Problem(response.status, await response.json().catch(() => null));
          sessionStorage.setItem(STORAGE.credential, credential);
          sessionStorage.removeItem(STORAGE.lastEventId);
          live.clear();
          refreshChrome();
          live.start();
          show(isAdmin ? "#apps" : "#users");
        })));
}

// MARK: - Navigation

function refreshChrome() {
  const signedIn = session.credential !== null;
  $("nav").hidden = !signedIn;
  $("identity").hidden = !signedIn;
  $("live").hidden = !signedIn;
  for (const link of document.querySelectorAll("[data-admin-only]")) link.hidden = !session.isAdmin;
  if (signedIn) {
    $("identity-text").textContent = session.isAdmin
      ? `Server admin${session.appID ? `, acting for app ${session.appID}` : ""}`
      : `App ${session.appID}`;
  }
}

async function route() {
  const [name, query] = location.hash.slice(1).split("?");
  const main = $("main");
  main.replaceChildren();
  clearMessages();
  const signedIn = session.credential !== null;
  const screen = signedIn ? (screens[name] ? name : session.isAdmin ? "apps" : "users") : null;
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.screen === screen) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `Parley console${screen ? ` — ${document.querySelector(`#nav a[data-screen="${screen}"]`).textContent}` : ""}`;
  try {
    if (screen === null) signIn(main);
    else await screens[screen](main, new URLSearchParams(query || ""));
  } catch (error) {
    showProblem(error);
  }
  // Move focus to the new screen's heading so keyboard and screen-reader users start there.
  const heading = $("screen-title");
  if (heading) {
    heading.setAttribute("tabindex", "-1");
    heading.focus();
  }
}

/** Goes to a screen; setting the hash to its current value fires no hashchange, so render directly then. */
function show(hash) {
  if (location.hash === hash || (hash === "" && location.hash === "#")) route();
  else location.hash = hash;
}

function init() {
  $("sign-out").addEventListener("click", () => {
    live.stop();
    for (const key of Object.values(STORAGE)) sessionStorage.removeItem(key);
    $("event-list").replaceChildren();
    refreshChrome();
    live.status("Not connected");
    show("");
  });
  $("live-clear").addEventListener("click", () => live.clear());
  window.addEventListener("hashchange", route);
  // Leaving the page ends the stream cleanly instead of as a failed request.
  window.addEventListener("pagehide", () => live.stop());
  refreshChrome();
  if (session.credential !== null) {
    live.restore();
    live.start();
  }
  route();
}

// Deferred scripts all run before DOMContentLoaded: the screens they register exist when the first one is drawn.
document.addEventListener("DOMContentLoaded", init);
