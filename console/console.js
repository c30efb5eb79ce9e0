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

/** A labelled input; `id` must be unique on the page. A `data-field` attribute names the API field (as the server
 * names it in a problem's `errors[].field`) so that the server's complaint about it is shown on the input itself. */
function field(id, label, attributes = {}) {
  return h("label", { for: id }, label, h("input", { id, name: id, ...attributes }));
}

/** A labelled select. `options` are values, or `[value, text]` pairs when the value is not readable as it is. */
function select(id, label, options, selected, attributes = {}) {
  return h("label", { for: id }, label,
    h("select", { id, name: id, ...attributes }, options.map((option) => {
      const [value, text] = Array.isArray(option) ? option : [option, option];
      return h("option", { value, selected: String(value) === String(selected) }, text);
    })));
}

function button(text, onclick, className) {
  return h("button", { type: "button", class: className, onclick }, text);
}

/** A form whose submit runs `action` with its values; problems are shown (the field errors also on their fields), the
 * page never navigates. */
function form(label, children, submitText, action) {
  const element = h("form", { "aria-label": label }, children, h("button", { type: "submit" }, submitText));
  element.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = Object.fromEntries(new FormData(element).entries());
    guarded(async () => {
      clearFieldErrors(element);
      try {
        await action(values, element);
      } catch (error) {
        showFieldErrors(element, error);
        throw error;
      }
    });
  });
  return element;
}

function clearFieldErrors(formElement) {
  for (const note of formElement.querySelectorAll(".field-error")) note.remove();
  for (const input of formElement.querySelectorAll("[aria-invalid]")) {
    input.removeAttribute("aria-invalid");
    input.removeAttribute("aria-describedby");
  }
}

/** Puts each `errors[]` entry of a problem next to the control of that field, so the operator sees which value the
 * server refused without matching names by eye. The first such control takes focus. */
function showFieldErrors(formElement, error) {
  if (!(error instanceof Problem) || !Array.isArray(error.problem.errors)) return;
  let first = null;
  for (const entry of error.problem.errors) {
    const control = controlForField(formElement, entry.field);
    if (!control) continue;
    const note = h("span", { class: "field-error", id: `${control.id}-error` }, entry.message);
    control.setAttribute("aria-invalid", "true");
    control.setAttribute("aria-describedby", note.id);
    control.closest("label").append(note);
    first = first || control;
  }
  if (first) first.focus();
}

/** The control a problem's field name points at: its `data-field`, or for nested names (`body.x`, `push.timeout_ms`,
 * `/push/timeout_ms`, `scope.user_id`) the longest match from the end, else the control of an enclosing object
 * (one control may hold a whole `scope`). */
function controlForField(formElement, name) {
  if (typeof name !== "string") return null;
  const parts = name.replace(/^\//, "").split(/[./[\]]/).filter(Boolean);
  for (let end = parts.length; end > 0; end -= 1) {
    for (let start = 0; start < end; start += 1) {
      const candidate = parts.slice(start, end).join(".");
      const control = formElement.querySelector(`[data-field="${CSS.escape(candidate)}"]`);
      if (control) return control;
    }
  }
  return null;
}

function formatTime(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms === -1) return "forever";
  if (ms === 0) return "no";
  return new Date(ms).toLocaleString();
}

/** A paragraph that says why a place is empty and what to do about it. */
function emptyState(...children) {
  return h("p", { class: "empty" }, children);
}

// MARK: - Tables

/** A table of `rows` (objects) with `columns` `[key, title, format?]` and an optional actions cell. Every column is
 * sortable: its header is a button, the sorted one carries aria-sort. Sorting orders the rows shown (the pages loaded
 * so far); the server's order is the first one. */
function table(columns, rows, actions) {
  const element = h("table", {});
  const headers = columns.map(([, title], index) =>
    h("th", { scope: "col" }, button(title, () => sortTable(element, index), "sort")));
  element.append(
    h("thead", {}, h("tr", {}, headers, actions ? h("th", { scope: "col" }, "Actions") : null)),
    h("tbody", {}, rows.map((row) => h("tr", {},
      columns.map(([key, , format]) => h("td", { "data-sort": sortValue(row[key]) }, format ? format(row[key], row) : row[key] ?? "")),
      actions ? h("td", { class: "actions" }, actions(row)) : null))));
  return element;
}

/** What a cell sorts by: its raw value, numbers zero-padded so that text order is number order. */
function sortValue(value) {
  if (typeof value === "number") return `n${String(Math.round(value) + 1e15).padStart(17, "0")}`;
  if (typeof value === "boolean") return value ? "b1" : "b0";
  if (value === null || value === undefined) return "";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

/** Sorts a table by column `index`: ascending first, a second click descending (or the given `direction`). */
function sortTable(element, index, direction) {
  const header = element.tHead.rows[0].cells[index];
  const next = direction || (header.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending");
  for (const cell of element.tHead.rows[0].cells) cell.removeAttribute("aria-sort");
  header.setAttribute("aria-sort", next);
  const body = element.tBodies[0];
  const rows = [...body.rows];
  const factor = next === "ascending" ? 1 : -1;
  rows.sort((a, b) => factor * a.cells[index].dataset.sort.localeCompare(b.cells[index].dataset.sort, undefined, { numeric: true }));
  body.append(...rows);
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

/** A message as its kind: the body (see bodyContent), revoke records and tips in words, a tombstone, and a mark on
 * a suppressed message (delivered to nobody; only the app key sees `suppressed`). */
function messageContent(message) {
  if (message.deleted) return h("span", { class: "muted" }, "(deleted for everyone)");
  const body = message.body || {};
  let content;
  if (message.type === 31) content = h("span", { class: "notice-line" }, revokeWords(message.from, body));
  else if (message.type === 32) content = h("span", { class: "notice-line" }, tipsWords(body));
  else content = bodyContent(message.type, body);
  if (!message.suppressed) return content;
  return h("div", {}, content,
    h("span", { class: "badge bad" }, `suppressed: ${message.suppressed}`),
    h("span", { class: "muted" }, " delivered to nobody"));
}

function bodyContent(type, body) {
  const name = body.file_name || "file";
  switch (type) {
    case 1: case 20: return h("span", {}, body.text);
    case 2: return h("span", { class: "muted" }, `command ${body.cmd ?? ""}`);
    case 11: {
      const src = body.thumbnail_url || body.url;
      return h("a", { href: body.url, target: "_blank", rel: "noopener", class: "media" },
        h("img", { src, alt: name, width: body.thumbnail_width || undefined, height: body.thumbnail_height || undefined, loading: "lazy" }));
    }
    case 12: return h("a", { href: body.url, download: name, class: "media" }, `File: ${name} (${formatBytes(body.file_size)})`);
    case 13: return h("div", { class: "media" }, h("audio", { controls: true, preload: "none", src: body.url, "aria-label": name }), h("div", { class: "muted" }, name));
    case 14: return h("div", { class: "media" },
      h("video", { controls: true, preload: "none", src: body.url, poster: body.first_frame_url || undefined,
        width: body.first_frame_width || undefined, "aria-label": name }),
      h("div", { class: "muted" }, name));
    case 10: return h("div", {}, (body.items || []).map((item) => h("div", {}, bodyContent(item.type, item.body || {}))));
    case 100: return h("span", {}, h("span", { class: "muted" }, "combined: "), body.title || "", body.summary ? ` — ${body.summary}` : "");
    case 200: return h("span", {}, h("span", { class: "muted" }, `custom ${body.sub_type}: `), body.data);
    default: return h("span", { class: "muted" }, `[type ${type}]`);
  }
}

// Who revoked, by `revoke_status` (docs/messages.md): 0 the sender, 2 the app, 3 a group admin, 4 the group owner.
const REVOKERS = { 3: "a group admin", 4: "the group owner" };

/** A revoke record (type 31) in words: "alice revoked a message", "the app revoked a message from alice". The
 * original text is in the body for the sender and the app key only, which the console is. */
function revokeWords(from, body) {
  const by = body.operator_id;
  let words;
  if (!by || body.revoke_status === 2) words = `the app revoked a message from ${from}`;
  else if (by === from) words = `${from} revoked a message`;
  else words = `${by}${REVOKERS[body.revoke_status] ? ` (${REVOKERS[body.revoke_status]})` : ""} revoked a message from ${from}`;
  return body.original_text ? `${words} (it said “${body.original_text}”)` : words;
}

const ROLES = { 1: "owner", 2: "admin", 3: "member" };
const roleName = (role) => ROLES[role] || `role ${role}`;

/** A tips message (type 32, docs/groups.md#tips-messages) in words: `{event, operator, targets, change}`. */
function tipsWords(body) {
  const who = body.operator ? body.operator.user_id : "the app";
  const targets = (body.targets || []).map((user) => user.user_id).join(", ");
  const change = body.change || {};
  switch (body.event) {
    case 1: return `${who} created the group${targets ? ` with ${targets}` : ""}`;
    case 2: return `${who} dismissed the group`;
    case 3: return `${targets || who} joined the group`;
    case 4: return `${targets} joined the group${body.operator ? `, invited by ${who}` : ""}`;
    case 5: return `${targets || who} left the group`;
    case 6: return `${targets} ${targets.includes(",") ? "were" : "was"} removed from the group${body.operator ? ` by ${who}` : ""}`;
    case 7: return groupChangeWords(who, change);
    case 8: return memberChangeWords(who, targets, change);
    case 9: return `${who} ${change.is_pinned ? "pinned" : "unpinned"} a message`;
    default: return `group notice ${body.event}`;
  }
}

function groupChangeWords(who, change) {
  if (change.type === 5) {
    const mute = change.mute || {};
    return mute.mode === "none" ? `${who} unmuted the group` : `${who} muted the group (${mute.mode})`;
  }
  const parts = [];
  if (change.name !== undefined) parts.push(`renamed the group to “${change.name}”`);
  if (change.notice !== undefined) parts.push("changed the notice");
  if (change.avatar_url !== undefined) parts.push("changed the avatar");
  return `${who} ${parts.join(" and ") || "changed the group"}`;
}

function memberChangeWords(who, targets, change) {
  switch (change.type) {
    case 10: return `${change.new_owner_id} is now the owner`;
    case 11: return `${who} made ${targets} ${change.role === 2 ? "an admin" : change.role === 3 ? "a member" : roleName(change.role)}`;
    case 12: return change.muted_until === 0 ? `${who} unmuted ${targets}` : `${who} muted ${targets} until ${formatTime(change.muted_until)}`;
    default: return `${who} changed ${targets}`;
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
    const text = message.type === 31 ? revokeWords(message.from, message.body)
      : message.type === 32 ? tipsWords(message.body)
        : message.body.text !== undefined ? `“${message.body.text}”` : `type ${message.type}`;
    return `${message.from} → ${message.conversation_type} ${message.to || ""}: ${text}`;
  }
  const ids = ["user_id", "group_id", "room_id", "call_id", "operator"]
    .map((key) => data[key] ?? data.user?.[key] ?? data.group?.[key] ?? data.device?.[key])
    .filter((value) => typeof value === "string");
  return ids.join(", ");
}

// MARK: - Shared by every screen script (console.js, and the scripts index.html loads after it)

/** How each screen is drawn: its title, and whether it needs an app to act for (app routes need one; the server admin
 * key must choose it on the Apps screen first). */
const screenOptions = {};

/** Adds a screen and its link in the navigation; the other scripts of the console register theirs with this. Scripts
 * load deferred, in order, and the first screen is drawn at DOMContentLoaded, after all of them registered. A screen
 * that works without an app (server-wide) says `needsApp: false`. */
function registerScreen(name, title, render, { adminOnly = false, needsApp = true } = {}) {
  screens[name] = render;
  screenOptions[name] = { title, needsApp };
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
        input ? h("label", { for: "confirm-typed" }, h("span", {}, "Type ", h("code", {}, typeToConfirm), " to confirm"), input) : null,
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

/** A list with a "Load more" button that follows `next_cursor` (API §1.5). The pages loaded so far are drawn as one
 * (so a sortable table sorts all of them, and keeps its sort when a page is added). `empty` (optional: text or nodes)
 * is shown when the list has no item, saying what to do. */
function pagedList(load, renderRows, empty) {
  const container = h("div", { class: "list" });
  const more = button("Load more", () => guarded(() => next()), "secondary");
  more.hidden = true;
  let cursor = null;
  let items = [];
  async function next() {
    const page = await load(cursor);
    items = items.concat(page.items || []);
    cursor = page.next_cursor || null;
    more.hidden = cursor === null;
    draw();
  }
  function draw() {
    const sorted = container.querySelector("th[aria-sort]");
    const sortIndex = sorted ? sorted.cellIndex : -1;
    const direction = sorted ? sorted.getAttribute("aria-sort") : null;
    if (items.length === 0 && empty !== undefined) {
      container.replaceChildren(emptyState(empty));
      return;
    }
    container.replaceChildren(renderRows(items));
    const drawn = container.querySelector("table");
    if (drawn && sortIndex >= 0) sortTable(drawn, sortIndex, direction);
  }
  return {
    element: h("div", {}, container, more),
    first: () => { items = []; cursor = null; return next(); },
  };
}

/** The per-item failures of a batch answer (`{results: [{id, ok, error: {code, message}}]}`, docs/errors.md) shown as
 * one problem, each failed id with the server's words; nothing when every item succeeded. */
function showBatchFailures(batch, title) {
  const results = (batch && batch.results) || [];
  const failed = results.filter((result) => !result.ok);
  if (!failed.length) return false;
  const box = $("problem");
  box.replaceChildren(
    h("h2", {}, `${title}: ${failed.length} of ${results.length}`),
    h("ul", {}, failed.map((result) =>
      h("li", {}, h("code", {}, result.id), `: ${result.error.message} (code ${result.error.code})`))));
  box.hidden = false;
  return true;
}

/** Users' ids typed into one field, comma or space separated. */
const idList = (text) => (text || "").split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);

/** A destructive API call behind a confirmation; nothing happens when the operator cancels. */
async function confirmed(question, typeToConfirm, action) {
  if (!(await confirmDestructive(question, typeToConfirm))) return;
  await action();
}

// MARK: - Apps and keys, app settings

/** Makes the admin key act for `appID` on app routes (it sends `Parley-App-Id`), restarting the live panel. */
function actFor(appID) {
  sessionStorage.setItem(STORAGE.actingApp, appID);
  sessionStorage.removeItem(STORAGE.lastEventId);
  live.clear();
  refreshChrome();
  live.start();
}

async function appsScreen(main, params) {
  main.append(screenHeading("Apps and keys"));
  if (!session.isAdmin) {
    main.append(emptyState("Apps and keys are managed with the server admin key. You are signed in with the key of app ",
      h("code", {}, session.appID), "; its settings are on the ", h("a", { href: "#settings" }, "Settings"), " screen."));
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
          actFor(app.app_id);
          route();
        }, app.app_id === session.appID ? "secondary" : undefined),
        button("Keys", () => guarded(() => showKeys(app.app_id)), "secondary"),
        h("a", { href: `#settings?app=${encodeURIComponent(app.app_id)}`, class: "button-link" }, "Settings"),
      ]),
    "No apps yet: create one with the form above.");

  async function showKeys(appID) {
    setScreenParams({ app: appID });
    const page = await api("GET", path("/v1/apps/{app_id}/keys", appID));
    keys.replaceChildren(
      h("h3", { tabindex: "-1" }, "Keys of ", h("code", {}, appID)),
      table(
        [["key_id", "Key id", (v) => h("code", {}, v)], ["name", "Name"], ["prefix", "Prefix", (v) => h("code", {}, v)],
          ["last_used_at", "Last used", formatTime], ["revoked_at", "Revoked", formatTime]],
        page.items,
        (key) => key.revoked_at ? [] : [button("Revoke", () => guarded(() => confirmed(
          `Revoke key ${key.name || key.key_id} of ${appID}? Every client using it gets 401 at once.`, undefined, async () => {
            await api("DELETE", path("/v1/apps/{app_id}/keys/{key_id}", appID, key.key_id));
            await showKeys(appID);
            notify(`Key ${key.key_id} revoked.`);
          })), "danger")]),
      form("New key", [field("key-name", "Key name", { required: true, maxlength: 64, "data-field": "name" })], "Create key", async (values) => {
        const key = await api("POST", path("/v1/apps/{app_id}/keys", appID), { body: { name: values["key-name"] } });
        await showKeys(appID);
        notify(h("p", { class: "secret" }, "New key (shown only now): ", h("code", {}, key.secret)));
      }),
      h("p", {}, button(`Delete app ${appID}…`, () => guarded(() => confirmed(
        `Delete app ${appID} with all of its users, groups, messages and files? This cannot be undone.`, appID, async () => {
          await api("DELETE", path("/v1/apps/{app_id}", appID));
          if (session.appID === appID) sessionStorage.removeItem(STORAGE.actingApp);
          setScreenParams({});
          keys.replaceChildren();
          refreshChrome();
          await list.first();
          notify(`App ${appID} deleted.`);
        })), "danger")));
    keys.querySelector("h3").focus();
  }

  main.append(
    form("New app", [
      field("app-id", "App id (optional)", { "data-field": "app_id", pattern: "[a-z0-9][a-z0-9_\\-]*", minlength: 3, maxlength: 32 }),
      field("app-name", "Name", { required: true, "data-field": "name" }),
    ], "Create app", async (values) => {
      const body = { name: values["app-name"] };
      if (values["app-id"]) body.app_id = values["app-id"];
      const created = await api("POST", "/v1/apps", { body });
      await list.first();
      notify(h("p", { class: "secret" }, `App ${created.app.app_id} created. Its key (shown only now): `,
        h("code", {}, created.key.secret)));
    }),
    list.element, keys);
  await list.first();
  if (params.get("app")) await showKeys(params.get("app"));
}

// Every field of the app settings object (openapi AppSettings), grouped as an operator thinks of them. A field is
// `[name, label, kind]`: kind "bool", a list of choices, `[min, max]` for integers, "words" (one per line) or "url".
const SETTINGS_GROUPS = [
  ["Messages", [
    ["friend_only_c2c", "Peer messages only between friends", "bool"],
    ["blacklist_feedback", "A blacklisted sender's message", [["silent", "silent: accepted, delivered to nobody"], ["error", "error: 403 to the sender"]]],
    ["revoke_window_s", "Senders may revoke for (s; 0 never)", [0, 2592000]],
    ["edit_window_s", "Senders may edit for (s; 0 never)", [0, 2592000]],
    ["text_max_bytes", "Largest text body (bytes)", [64, 32768]],
    ["history_retention_days", "Keep history for (days; 0 forever)", [0, 3650]],
  ]],
  ["Sensitive words", [
    ["sensitive_words", "Words (one per line, 1–64 bytes each)", "words"],
    ["sensitive_word_action", "On a match", [["reject", "reject the message (422)"], ["mask", "mask the word with *"]]],
  ]],
  ["Groups and rooms", [
    ["max_group_members", "Largest group (members)", [2, 100000]],
    ["big_group_threshold", "A group is big above (members)", [2, 100000]],
    ["application_expiry_s", "Friend and group applications expire after (s)", [60, 2592000]],
    ["max_rooms_per_user", "Rooms one user may be in", [1, 100]],
    ["room_offline_leave_s", "Remove an offline room member after (s; 0 never, else 10–86400)", [0, 86400]],
  ]],
  ["Rate limits", [
    ["rate_limit_app_rps", "App key requests per second", [1, 100000]],
    ["rate_limit_user_rps", "Requests per second per user token", [1, 100000]],
    ["user_send_rate_per_s", "Message sends per second per user", [1, 100000]],
  ]],
  ["Tokens and events", [
    ["token_default_ttl_s", "Default user token lifetime (s)", [60, 2592000]],
    ["event_retention_hours", "Keep the event log for (hours)", [1, 720]],
  ]],
  ["Files", [
    ["file_max_bytes", "Largest file, audio or video upload (bytes)", [1024, 2147483648]],
    ["image_max_bytes", "Largest image upload (bytes)", [1024, 104857600]],
    ["image_max_pixels", "Largest image (pixels)", [10000, 200000000]],
    ["app_storage_quota_bytes", "Storage quota (bytes; 0 unlimited)", [0, 1000000000000000]],
    ["file_url_ttl_s", "Download links valid for (s)", [60, 31536000]],
    ["delete_files_with_messages", "Delete a file with the last message that names it", "bool"],
    ["file_retention_days", "Delete unreferenced files after (days; 0 never)", [0, 3650]],
  ]],
  ["Automatic moderation", [
    ["automod_block_threshold", "Blocked sends that trigger it (0 off)", [0, 1000]],
    ["automod_window_s", "Counted within (s)", [10, 86400]],
    ["automod_action", "Then", [["mute", "mute the user"], ["ban", "ban the user"]]],
    ["automod_mute_s", "Automatic mute lasts (s)", [60, 2592000]],
  ]],
  ["Push", [
    ["push.enabled", "Push bridge on", "bool"],
    ["push.gateway_url", "Gateway URL (http or https)", "url"],
    ["push.format", "Wire format", ["matrix", "generic"]],
    ["push.secret", "Signing secret (generic format)", "secret"],
    ["push.event_id_only", "Privacy mode: event ids only", "bool"],
    ["push.timeout_ms", "Gateway timeout (ms)", [100, 30000]],
    ["push.max_attempts", "Attempts per push", [1, 10]],
  ]],
];

const settingValue = (settings, name) => name.split(".").reduce((object, key) => (object || {})[key], settings);

/** The control of one setting, its value filled in; its id is `set-<name>` and `data-field` the API name. */
function settingControl([name, label, kind], value) {
  const id = `set-${name.replace(".", "-")}`;
  const common = { "data-field": name };
  if (kind === "bool") {
    return h("label", { for: id, class: "check" }, h("input", { id, name: id, type: "checkbox", checked: value === true, ...common }), label);
  }
  if (kind === "words") {
    return h("label", { for: id, class: "wide" }, label,
      h("textarea", { id, name: id, rows: 4, ...common }, (value || []).join("\n")));
  }
  if (Array.isArray(kind) && typeof kind[0] === "number") {
    return field(id, label, { type: "number", min: kind[0], max: kind[1], step: 1, required: true, value, ...common });
  }
  if (Array.isArray(kind)) return select(id, label, kind, value, common);
  const type = kind === "url" ? "url" : kind === "secret" ? "password" : "text";
  return field(id, label, { type, value: value ?? "", autocomplete: "off", maxlength: 2048, ...common });
}

/** The value a control holds, as the API takes it. */
function controlValue(control, kind) {
  if (kind === "bool") return control.checked;
  if (kind === "words") return control.value.split("\n").map((w) => w.trim()).filter(Boolean);
  if (Array.isArray(kind) && typeof kind[0] === "number") return Number(control.value);
  // An empty URL or secret is "not set", which the API writes as null.
  if (kind === "url" || kind === "secret") return control.value.trim() === "" ? null : control.value.trim();
  return control.value;
}

/** Only the settings that changed, nested as the API takes them (`push` is merged key by key). */
function changedSettings(formElement, settings) {
  const patch = {};
  for (const [, fields] of SETTINGS_GROUPS) {
    for (const spec of fields) {
      const [name, , kind] = spec;
      const value = controlValue(formElement.querySelector(`[data-field="${name}"]`), kind);
      if (JSON.stringify(value) === JSON.stringify(settingValue(settings, name) ?? (kind === "words" ? [] : null))) continue;
      const [outer, inner] = name.split(".");
      if (inner) patch[outer] = { ...patch[outer], [inner]: value };
      else patch[outer] = value;
    }
  }
  return patch;
}

/** App settings: the admin key edits any app's (`/v1/apps/{app_id}/settings`), an app key its own (`/v1/settings`). */
async function settingsScreen(main, params) {
  const appID = session.isAdmin ? params.get("app") || session.appID : session.appID;
  main.append(screenHeading("App settings"));
  if (!appID) {
    main.append(emptyState("Choose an app first: open its settings from the ", h("a", { href: "#apps" }, "Apps screen"), "."));
    return;
  }
  const url = session.isAdmin ? path("/v1/apps/{app_id}/settings", appID) : "/v1/settings";
  const box = h("div", {});
  main.append(h("p", { class: "muted" }, "Settings of app ", h("code", {}, appID), ". Only the values you change are sent."), box);

  async function draw(settings) {
    const element = form("App settings", SETTINGS_GROUPS.map(([legend, fields]) => h("fieldset", {},
      h("legend", {}, legend), fields.map((spec) => settingControl(spec, settingValue(settings, spec[0]))))),
    "Save settings", async () => {
      const patch = changedSettings(element, settings);
      if (Object.keys(patch).length === 0) {
        notify("Nothing changed.");
        return;
      }
      const saved = await api("PATCH", url, { body: patch });
      await draw(saved);
      notify(`Saved ${Object.keys(patch).join(", ")} of app ${appID}.`);
    });
    element.classList.add("settings");
    box.replaceChildren(element);
  }
  await draw(await api("GET", url));
}

// MARK: - Users

/** The state of a user in words, from its `*_until` fields and `deleted_at` (docs/users.md). */
function userState(user) {
  if (user.deleted_at) return `deleted ${formatTime(user.deleted_at)}`;
  const states = [];
  if (user.banned_until) states.push(`banned until ${formatTime(user.banned_until)}`);
  if (user.muted_until) states.push(`muted until ${formatTime(user.muted_until)}`);
  return states.join(", ") || "active";
}

async function usersScreen(main, params) {
  main.append(screenHeading("Users"));
  const detail = h("section", { "aria-label": "Selected user" });
  const search = { q: params.get("q") || "", state: params.get("state") || "active" };
  let selected = params.get("user") || "";
  const remember = () => setScreenParams({ q: search.q, state: search.state === "active" ? "" : search.state, user: selected });
  const list = pagedList(
    (cursor) => api("GET", "/v1/users", { query: { ...search, limit: 20, cursor } }),
    (users) => table(
      [["user_id", "User id", (v) => h("code", {}, v)], ["name", "Name"], ["muted_until", "Muted", formatTime],
        ["banned_until", "Banned", formatTime], ["created_at", "Created", formatTime]],
      users,
      (user) => [button(`Manage ${user.user_id}`, () => guarded(() => manage(user.user_id)), "secondary")]),
    search.q || search.state !== "active"
      ? "No user matches this search: change the text or the state."
      : "No users yet: create one with the form above, or import them through the API (POST /v1/users/import).");

  async function refresh(userID) {
    await Promise.all([list.first(), manage(userID)]);
  }

  /** One user's page. A soft-deleted user is read with `include_deleted` (app key): it can only be restored or erased. */
  async function manage(userID) {
    selected = userID;
    remember();
    const user = await api("GET", path("/v1/users/{user_id}", userID), { query: { include_deleted: true } });
    const parts = user.deleted_at ? deletedUserParts(user, refresh, async () => {
      selected = "";
      remember();
      detail.replaceChildren();
      await list.first();
    }) : activeUserParts(user, refresh);
    detail.replaceChildren(
      h("h3", { tabindex: "-1" }, "User ", h("code", {}, user.user_id), user.name ? ` (${user.name})` : ""),
      h("p", { class: "muted" }, `State: ${userState(user)} · created ${formatTime(user.created_at)}`),
      ...parts);
    detail.querySelector("h3").focus();
  }

  main.append(
    form("New user", [field("new-user-id", "User id", { required: true, "data-field": "user_id" }), field("new-user-name", "Name", { "data-field": "name" })], "Create user",
      async (values, element) => {
        const user = await api("POST", "/v1/users", { body: { user_id: values["new-user-id"], name: values["new-user-name"] } });
        element.reset();
        await list.first();
        notify(`User ${user.user_id} created.`);
      }),
    form("Search users", [
      field("user-q", "Search (id prefix or name)", { type: "search", value: search.q }),
      select("user-state", "State", ["active", "muted", "banned", "deleted", "all"], search.state),
    ], "Search", async (values) => {
      search.q = values["user-q"];
      search.state = values["user-state"];
      remember();
      await list.first();
    }),
    list.element, detail);
  await list.first();
  if (selected) await manage(selected);
}

/** What can be done to a soft-deleted user: restore it, or erase it for good (typing its id). */
function deletedUserParts(user, refresh, gone) {
  const userID = user.user_id;
  return [
    emptyState("This user is deleted: its tokens are invalid and it is hidden. Restore it to bring it back with its friends, groups and history."),
    h("p", {},
      button(`Restore ${userID}`, () => guarded(async () => {
        await api("POST", path("/v1/users/{user_id}/restore", userID), { body: {} });
        await refresh(userID);
        notify(`${userID} restored.`);
      })), " ",
      button("Delete permanently…", () => guarded(() => confirmed(
        `Delete ${userID} permanently? Its data is removed and cannot be restored.`, userID, async () => {
          await api("DELETE", path("/v1/users/{user_id}", userID), { query: { mode: "hard" } });
          await gone();
          notify(`${userID} deleted permanently.`);
        })), "danger")),
  ];
}

function activeUserParts(user, refresh) {
  const userID = user.user_id;
  const result = h("div", { role: "status" });
  const devices = h("section", { "aria-label": "Push devices" });
  const events = h("section", { "aria-label": "Event log of the user" });
  const parts = [
    form("Edit user", [
      field("edit-name", "Name", { value: user.name, "data-field": "name" }),
      field("edit-avatar", "Avatar URL", { value: user.avatar_url, "data-field": "avatar_url" }),
      field("edit-extended", "Extended data", { value: user.extended_data, "data-field": "extended_data" }),
    ], "Save", async (values) => {
      await api("PATCH", path("/v1/users/{user_id}", userID), {
        body: { name: values["edit-name"], avatar_url: values["edit-avatar"], extended_data: values["edit-extended"] },
      });
      await refresh(userID);
      notify(`Saved ${userID}.`);
    }),
    form("Mute user", [
      field("mute-duration", "Mute for (seconds; -1 forever, 0 unmute)", { type: "number", min: -1, value: 3600, required: true, "data-field": "duration_s" }),
    ], "Set mute", async (values) => {
      await api("POST", path("/v1/users/{user_id}/mute", userID), { body: { duration_s: Number(values["mute-duration"]) } });
      await refresh(userID);
      notify(`Mute of ${userID} updated.`);
    }),
    user.banned_until
      ? h("p", {}, button(`Unban ${userID}`, () => guarded(async () => {
        await api("POST", path("/v1/users/{user_id}/unban", userID), { body: {} });
        await refresh(userID);
        notify(`${userID} unbanned.`);
      })))
      : form("Ban user", [
        field("ban-duration", "Ban for (seconds; -1 forever)", { type: "number", min: -1, value: 86400, required: true, "data-field": "duration_s" }),
        field("ban-reason", "Reason", { maxlength: 256, "data-field": "reason" }),
      ], "Ban", async (values) => {
        const body = { duration_s: Number(values["ban-duration"]) };
        if (values["ban-reason"]) body.reason = values["ban-reason"];
        if (!(await confirmDestructive(`Ban ${userID}? Its streams close and it cannot sign in until the ban ends.`))) return;
        await api("POST", path("/v1/users/{user_id}/ban", userID), { body });
        await refresh(userID);
        notify(`${userID} banned.`);
      }),
    form("Issue a token", [
      field("token-ttl", "Token lifetime (seconds)", { type: "number", min: 60, max: 2592000, value: 3600, required: true, "data-field": "ttl_s" }),
    ], "Issue token", async (values) => {
      const token = await api("POST", path("/v1/users/{user_id}/tokens", userID), { body: { ttl_s: Number(values["token-ttl"]) } });
      result.replaceChildren(h("p", { class: "secret" }, `Token for ${userID}, expires ${formatTime(token.expires_at)}: `,
        h("code", {}, token.token)));
    }),
    h("p", { class: "actions" },
      button("Kick (close streams, revoke tokens)", () => guarded(() => confirmed(
        `Kick ${userID}? Its open streams close and every token issued so far stops working.`, undefined, async () => {
          const kicked = await api("POST", path("/v1/users/{user_id}/kick", userID), { body: {} });
          notify(`${userID} kicked: ${kicked.closed_streams} stream(s) closed.`);
        })), "danger"), " ",
      button("Delete…", () => guarded(() => confirmed(
        `Delete ${userID}? Its tokens stop working and it is hidden; it can be restored from the deleted users.`, userID, async () => {
          await api("DELETE", path("/v1/users/{user_id}", userID), { query: { mode: "soft" } });
          await refresh(userID);
          notify(`${userID} deleted (restorable).`);
        })), "danger"), " ",
      h("a", { href: `#conversation?user=${encodeURIComponent(userID)}` }, "Open a conversation as this user"), " ",
      h("a", { href: `#search?user_id=${encodeURIComponent(userID)}` }, "Search its messages"),
      screens.eventlog ? [" ", h("a", { href: `#eventlog?user_id=${encodeURIComponent(userID)}` }, "Event log screen")] : null),
    result, devices, events,
  ];
  guarded(() => Promise.all([showDevices(userID, devices), showUserEvents(userID, events)]));
  return parts;
}

async function showDevices(userID, section) {
  const page = await api("GET", path("/v1/users/{user_id}/devices", userID));
  section.replaceChildren(h("h4", {}, "Push devices"),
    page.items.length === 0
      ? emptyState("No push devices: the user's apps register them with POST /v1/users/{user_id}/devices (see docs/push.md).")
      : table([["device_id", "Device", (v) => h("code", {}, v)], ["platform", "Platform"], ["provider", "Provider"],
        ["voip", "VoIP", (v) => v ? "yes" : "no"], ["last_push_at", "Last push", formatTime]], page.items));
}

/** The events whose audience includes the user (`GET /v1/events/log?user_id=`), oldest first, a page at a time. */
async function showUserEvents(userID, section) {
  const limit = 20;
  const list = pagedList(async (cursor) => {
    const page = await api("GET", "/v1/events/log", { query: { user_id: userID, after: cursor || "earliest", limit } });
    // The log's cursor always points at its head; a short page means there is nothing more yet.
    return { items: page.items, next_cursor: page.items.length < limit ? null : page.next_cursor };
  }, (items) => table([["id", "Event", (v) => h("code", {}, v)], ["type", "Type"], ["created_at", "At", formatTime],
    ["data", "About", (v, event) => summarize(event)]], items),
  "No events about this user in the log (events are kept for the app's event_retention_hours).");
  section.replaceChildren(h("h4", {}, "Event log"), list.element);
  await list.first();
}

// MARK: - Groups

async function groupsScreen(main, params) {
  main.append(screenHeading("Groups"));
  const detail = h("section", { "aria-label": "Selected group" });
  let q = params.get("q") || "";
  let selected = params.get("group") || "";
  const remember = () => setScreenParams({ q, group: selected });
  const list = pagedList(
    (cursor) => api("GET", "/v1/groups", { query: { q, limit: 20, cursor } }),
    (groups) => table(
      [["group_id", "Group id", (v) => h("code", {}, v)], ["name", "Name"], ["owner_id", "Owner"],
        ["member_count", "Members"], ["created_at", "Created", formatTime]],
      groups,
      (group) => [button(`Members of ${group.group_id}`, () => guarded(() => open(group.group_id)), "secondary")]),
    q ? "No group matches this name: change the search." : "No groups yet: create one with the form above.");

  async function open(groupID) {
    selected = groupID;
    remember();
    const group = await api("GET", path("/v1/groups/{group_id}", groupID));
    await groupDetail(group, detail, async () => {
      selected = "";
      remember();
      detail.replaceChildren();
      await list.first();
    });
  }

  main.append(
    form("New group", [
      field("group-id", "Group id (optional)", { "data-field": "group_id" }),
      field("group-name", "Name", { "data-field": "name" }),
      field("group-owner", "Owner user id", { required: true, "data-field": "operator" }),
      field("group-members", "Members (comma separated)", { "data-field": "members" }),
    ], "Create group", async (values, element) => {
      const body = { name: values["group-name"], operator: values["group-owner"], members: idList(values["group-members"]) };
      if (values["group-id"]) body.group_id = values["group-id"];
      const created = await api("POST", "/v1/groups", { body });
      element.reset();
      await list.first();
      notify(`Group ${created.group.group_id} created.`);
    }),
    form("Search groups", [field("group-q", "Search by name", { type: "search", value: q })], "Search", async (values) => {
      q = values["group-q"];
      remember();
      await list.first();
    }),
    list.element, detail);
  await list.first();
  if (selected) await open(selected);
}

/** One group: its members with their roles and mutes, the forms that change them, and dismissal. The console acts as
 * the app (no `operator`), which the role and membership rules do not restrict. */
async function groupDetail(group, detail, dismissed) {
  const groupID = group.group_id;
  const groupPath = (template, ...ids) => path(template, groupID, ...ids);
  const reload = () => Promise.all([memberList.first(), api("GET", groupPath("/v1/groups/{group_id}"))
    .then((fresh) => { summary.textContent = groupSummary(fresh); })]);
  const summary = h("p", { class: "muted" }, groupSummary(group));
  const memberList = pagedList(
    (cursor) => api("GET", groupPath("/v1/groups/{group_id}/members"), { query: { limit: 50, cursor } }),
    (items) => table(
      [["user_id", "User id", (v) => h("code", {}, v)], ["name", "Name"], ["role", "Role", roleName], ["nickname", "Nickname"],
        ["muted_until", "Muted", formatTime], ["joined_at", "Joined", formatTime]],
      items,
      (member) => member.role === 1 ? [] : [button(`Remove ${member.user_id}`, () => guarded(() => confirmed(
        `Remove ${member.user_id} from ${groupID}?`, undefined, async () => {
          const batch = await api("POST", groupPath("/v1/groups/{group_id}/members/kick"), { body: { user_ids: [member.user_id] } });
          await reload();
          if (!showBatchFailures(batch, "The member was not removed")) notify(`${member.user_id} removed from ${groupID}.`);
        })), "danger")]),
    "The group has no members left.");
  const closed = group.dismissed_at !== null && group.dismissed_at !== undefined;

  detail.replaceChildren(
    h("h3", { tabindex: "-1" }, "Group ", h("code", {}, groupID), group.name ? ` (${group.name})` : ""),
    summary,
    ...(closed ? [emptyState("This group is dismissed: its members and history can be read, nothing can be changed.")] : [
      form("Add members", [field("invite-ids", "User ids (comma separated)", { required: true, "data-field": "user_ids" })], "Add", async (values, element) => {
        const batch = await api("POST", groupPath("/v1/groups/{group_id}/members/invite"), { body: { user_ids: idList(values["invite-ids"]) } });
        await reload();
        if (!showBatchFailures(batch, "Some users were not added")) {
          element.reset();
          notify(`Added ${batch.results.map((r) => r.id).join(", ")}.`);
        }
      }),
      form("Set a member's role", [
        field("role-user", "Member user id", { required: true, "data-field": "to_user_id" }),
        select("role-value", "Role", [["3", "member"], ["2", "admin"], ["1", "owner (transfers ownership)"]], "2", { "data-field": "role" }),
      ], "Set role", async (values) => setRole(groupID, values["role-user"], Number(values["role-value"]), reload)),
      form("Mute a member", [
        field("member-mute-user", "Member user id", { required: true, "data-field": "user_ids" }),
        field("member-mute-duration", "Mute for (seconds; -1 forever, 0 unmute, at most 604800)", { type: "number", min: -1, max: 604800, value: 3600, required: true, "data-field": "duration_s" }),
      ], "Set mute", async (values) => {
        const userID = values["member-mute-user"];
        const batch = await api("POST", groupPath("/v1/groups/{group_id}/members/mute"), {
          body: { user_ids: [userID], duration_s: Number(values["member-mute-duration"]) },
        });
        await reload();
        if (!showBatchFailures(batch, "The mute was not set")) notify(`Mute of ${userID} in ${groupID} updated.`);
      }),
    ]),
    memberList.element,
    h("p", { class: "actions" },
      h("a", { href: `#conversation?user=${encodeURIComponent(group.owner_id)}&type=group&id=${encodeURIComponent(groupID)}` },
        "Open the group's conversation as its owner"), " ",
      closed ? null : button(`Dismiss ${groupID}…`, () => guarded(() => confirmed(
        `Dismiss group ${groupID}? Every member loses it and nothing can be sent to it again.`, groupID, async () => {
          await api("POST", groupPath("/v1/groups/{group_id}/dismiss"), { body: {} });
          await dismissed();
          notify(`Group ${groupID} dismissed.`);
        })), "danger")));
  await memberList.first();
  detail.querySelector("h3").focus();
}

function groupSummary(group) {
  const muted = group.mute && group.mute.mode !== "none" ? ` · muted (${group.mute.mode})` : "";
  return `Owner ${group.owner_id} · ${group.member_count} member(s) · join ${group.join_mode}, invite ${group.invite_mode}${muted}` +
    (group.dismissed_at ? ` · dismissed ${formatTime(group.dismissed_at)}` : "");
}

/** Role 1 is the owner: ownership moves by transfer (the old owner becomes a member); 2 and 3 are set directly. */
async function setRole(groupID, userID, role, reload) {
  if (role === 1) {
    if (!(await confirmDestructive(`Make ${userID} the owner of ${groupID}? The current owner becomes a member.`))) return;
    await api("POST", path("/v1/groups/{group_id}/transfer_owner", groupID), { body: { to_user_id: userID } });
  } else {
    await api("PUT", path("/v1/groups/{group_id}/members/{member_id}/role", groupID, userID), { body: { role } });
  }
  await reload();
  notify(`${userID} is now ${role === 1 ? "the owner" : role === 2 ? "an admin" : "a member"} of ${groupID}.`);
}

// MARK: - Conversation and message search

/** The extras around a message: what it replies to, its reactions, its pin. */
function messageExtras(message) {
  const extras = [];
  if (message.reply) {
    const reply = message.reply;
    const quoted = reply.state === "normal" && reply.snapshot
      ? bodyContent(reply.snapshot.type, reply.snapshot.body || {})
      : h("span", { class: "muted" }, reply.state === "deleted" ? "(a deleted message)" : "(a message no longer found)");
    extras.push(h("blockquote", { class: "reply" }, h("span", { class: "muted" }, `In reply to ${reply.from}: `), quoted));
  }
  if (message.reply_count) extras.push(h("span", { class: "badge" }, `${message.reply_count} repl${message.reply_count === 1 ? "y" : "ies"}`));
  if (message.pinned) extras.push(h("span", { class: "badge" }, `pinned${message.pinned.by ? ` by ${message.pinned.by}` : ""}`));
  if (message.edit_count) extras.push(h("span", { class: "badge" }, `edited${message.editor_id ? ` by ${message.editor_id}` : ""}`));
  for (const reaction of message.reactions || []) {
    extras.push(h("span", { class: "badge reaction", title: (reaction.user_ids || []).join(", ") },
      `${reaction.reaction_type} ${reaction.count}`));
  }
  return extras.length ? h("div", { class: "extras" }, extras) : null;
}

/** Whether the app may still act on a message: not on revoke records, tips or tombstones. */
const actionable = (message) => !message.deleted && message.type !== 31 && message.type !== 32 && message.seq !== null;

/** A message as a list item, with the app's actions on it; `replace` redraws it after an action. */
function messageItem(message, replace) {
  const id = message.message_id;
  const act = (action) => guarded(async () => {
    if ((await action()) === false) return;
    replace(await api("GET", path("/v1/messages/{message_id}", id)));
  });
  const actions = actionable(message) ? h("div", { class: "actions" },
    button(message.pinned ? "Unpin" : "Pin", () => act(async () => {
      await api("POST", path(message.pinned ? "/v1/messages/{message_id}/unpin" : "/v1/messages/{message_id}/pin", id), { body: {} });
    }), "secondary"),
    button("Revoke", () => act(async () => {
      if (!(await confirmDestructive(`Revoke this message from ${message.from}? Everyone sees that the app revoked it.`))) return false;
      await api("POST", path("/v1/messages/{message_id}/revoke", id), { body: {} });
    }), "danger"),
    button("Delete for everyone…", () => act(async () => {
      if (!(await confirmDestructive(`Delete message ${id} for everyone? It becomes a tombstone in every history.`, id))) return false;
      const batch = await api("POST", "/v1/messages/delete", { body: { scope: "everyone", message_ids: [id] } });
      if (showBatchFailures(batch, "The message was not deleted")) return false;
    }), "danger")) : null;
  return h("li", { "data-message-id": id, "data-type": message.type },
    h("div", { class: "meta" }, `#${message.seq ?? "-"} · ${message.from} · ${formatTime(message.timestamp)}`),
    messageContent(message), messageExtras(message), actions);
}

async function conversationScreen(main, params) {
  main.append(screenHeading("Conversation"));
  const history = h("ol", { class: "messages", "aria-label": "Messages, oldest first" });
  const older = button("Older messages", () => guarded(() => loadOlder()), "secondary");
  const view = h("section", { "aria-label": "Conversation" });
  older.hidden = true;
  let current = null;
  let cursor = null;

  const historyPath = () => path("/v1/users/{user_id}/conversations/{type}/{id}/messages", current.user, current.type, current.id);
  /** A list item that redraws itself in place after an action on its message. */
  function line(message) {
    const item = messageItem(message, (fresh) => item.replaceWith(line(fresh)));
    return item;
  }
  async function loadOlder() {
    // include_hidden: the operator also sees what the user deleted for itself and other users' suppressed messages.
    const page = await api("GET", historyPath(), { query: { limit: 20, cursor, include_hidden: true } });
    // The API pages newest first; the viewer reads oldest first, so each older page goes on top.
    history.prepend(...page.items.slice().reverse().map(line));
    cursor = page.next_cursor || null;
    older.hidden = cursor === null;
    if (!history.children.length) history.replaceWith(emptyHistory);
  }
  const emptyHistory = emptyState("No messages yet: send the first one below.");
  async function open(values) {
    current = values;
    cursor = null;
    setScreenParams(current);
    history.replaceChildren();
    view.replaceChildren(
      h("h3", { tabindex: "-1" }, `${current.user} ↔ ${current.type} ${current.id}`),
      older, history,
      form("Send a message", [field("send-text", `Text (sent as ${current.user})`, { required: true, autocomplete: "off", "data-field": "body.text" })], "Send",
        async (sent, element) => {
          const message = await api("POST", "/v1/messages", {
            body: { from: current.user, conversation_type: current.type, to: current.id, type: 1, body: { text: sent["send-text"] } },
          });
          if (emptyHistory.isConnected) emptyHistory.replaceWith(history);
          history.append(line(message));
          if (message.suppressed) notify(`Sent, but suppressed (${message.suppressed}): it was delivered to nobody.`);
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
  else view.append(emptyState("Choose a user and the user or group it talks with, then Open."));
}

// The filters of the message search screen, as URL parameter and API parameter (GET /v1/messages/search).
const SEARCH_FILTERS = ["q", "user_id", "conversation_type", "conversation_id", "senders", "types", "order"];

/** The conversation a search hit belongs to, seen by the searched user or else by its sender. */
function conversationLink(message, userID) {
  const user = userID || message.from;
  const other = message.conversation_type === "peer" && message.to === user ? message.from : message.to;
  return h("a", { href: `#conversation?${new URLSearchParams({ user, type: message.conversation_type, id: other })}` }, "Open");
}

async function searchScreen(main, params) {
  main.append(screenHeading("Message search"));
  const filters = Object.fromEntries(SEARCH_FILTERS.map((name) => [name, params.get(name) || ""]));
  const results = h("section", { "aria-label": "Search results" });
  const list = pagedList(
    (cursor) => api("GET", "/v1/messages/search", { query: { ...filters, limit: 20, cursor } }),
    (items) => table([
      ["timestamp", "Sent", formatTime], ["from", "From", (v) => h("code", {}, v)],
      ["to", "Conversation", (v, m) => `${m.conversation_type} ${m.conversation_type === "peer" ? `${m.from} → ${v}` : v}`],
      ["body", "Message", (v, m) => messageContent(m)],
    ], items, (message) => [conversationLink(message, filters.user_id)]),
    "No message matches: try fewer keywords, another user or no filter at all (an empty search lists the newest messages).");
  main.append(
    form("Search messages", [
      field("search-q", "Keywords (all must occur)", { type: "search", value: filters.q, "data-field": "q" }),
      field("search-user", "In the history of user (optional)", { value: filters.user_id, "data-field": "user_id" }),
      select("search-type", "Conversation type", [["", "any"], "peer", "group", "room"], filters.conversation_type, { "data-field": "conversation_type" }),
      field("search-conversation", "Conversation id (peer: the other user)", { value: filters.conversation_id, "data-field": "conversation_id" }),
      field("search-senders", "Senders (comma separated)", { value: filters.senders, "data-field": "senders" }),
      field("search-types", "Message types (e.g. 1,11)", { value: filters.types, "data-field": "types" }),
      select("search-order", "Order", [["", "newest first"], ["asc", "oldest first"]], filters.order),
    ], "Search", async (values) => {
      Object.assign(filters, {
        q: values["search-q"], user_id: values["search-user"], conversation_type: values["search-type"],
        conversation_id: values["search-conversation"], senders: idList(values["search-senders"]).join(","),
        types: values["search-types"].replace(/\s+/g, ""), order: values["search-order"],
      });
      setScreenParams(filters);
      await list.first();
    }),
    results);
  results.append(list.element);
  await list.first();
}

async function statsScreen(main) {
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
      stats === null ? emptyState("Choose the app to act for on the ", h("a", { href: "#apps" }, "Apps screen"), " to see its statistics.")
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
}

// The screens of this script, in navigation order; the other scripts register theirs after these.
const screens = {};
registerScreen("apps", "Apps and keys", appsScreen, { adminOnly: true, needsApp: false });
registerScreen("settings", "Settings", settingsScreen, { needsApp: false });
registerScreen("users", "Users", usersScreen);
registerScreen("groups", "Groups", groupsScreen);
registerScreen("conversation", "Conversation", conversationScreen);
registerScreen("search", "Message search", searchScreen);
registerScreen("stats", "Stats and health", statsScreen, { needsApp: false });

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
  document.title = `Parley console${screen ? ` — ${screenOptions[screen].title}` : ""}`;
  try {
    if (screen === null) signIn(main);
    else if (session.appID === null && screenOptions[screen].needsApp) chooseAppFirst(main, screen);
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

/** What an app screen shows to the server admin key before it chose an app: app routes need `Parley-App-Id`, and
 * the server would only answer 400. */
function chooseAppFirst(main, screen) {
  main.append(screenHeading(screenOptions[screen].title),
    emptyState("The server admin key acts for one app at a time. Choose the app on the ", h("a", { href: "#apps" }, "Apps screen"),
      " (“Act for this app”), then come back here."));
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
