#!/usr/bin/env python3
"""Drives the admin console (GET /console) in Debian's Chromium, headless, through playwright.

usage: console_check.py <base url> <app key> <admin key> <screenshot dir>

With the app key: users (create, manage, mute, ban, kick, delete and restore, devices, event log), groups (add
members with a partial failure, roles, member mute, remove, dismiss), the conversation screen (live panel ≤ 1 s,
history paging, reload resume against GET /v1/events/log, media, a suppressed send, revoke records and tips in words,
replies, reactions, pins, revoke and delete for everyone), message search and app settings; then with the admin key:
the empty state before an app is chosen, apps and keys, the settings of another app, and every app screen again while
acting for the app. Every action's effect is read back through the API; every form shows a provoked problem (field
errors on their fields); destructive actions wait for their confirmation. Then an accessibility pass (no unnamed
button, text box, combo box or check box) and a 390 px pass (the page never scrolls sideways), with a screenshot of
every screen. Fails on any JavaScript error, and on any console error other than the failed requests it provokes.
Started by scripts/console-check.sh, which owns the server.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from playwright.sync_api import sync_playwright

# Every wait is bounded: a step that hangs fails the check instead of the CI job's clock.
STEP_TIMEOUT_MS = 10_000
LIVE_DEADLINE_S = 1.0
# The roles an accessible name is required for, as aria_snapshot() writes them.
NAMED_ROLES = ("button", "textbox", "searchbox", "combobox", "checkbox", "spinbutton")


def wait_connected(page):
    # Selectors, not wait_for_function: polling a function is an eval, which the console's CSP rightly refuses.
    page.wait_for_selector("#live-status:text-matches('^Connected')")


def jpeg(width, height):
    """A small JPEG, written by libvips' command-line tool (libvips-tools, installed with the server's libraries)."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "photo.jpg")
        subprocess.run(["vips", "black", path, str(width), str(height)], check=True)
        with open(path, "rb") as f:
            return f.read()


def unnamed_controls(snapshot):
    """The lines of an aria snapshot (YAML) that are a control without a name: `- button` or `- textbox [disabled]`."""
    pattern = re.compile(r"^\s*- (%s)(\s*\[[^\]]*\])*\s*:?\s*$" % "|".join(NAMED_ROLES))
    return [line.strip() for line in snapshot.splitlines() if pattern.match(line)]


class Check:
    def __init__(self, base, app_key, admin_key, shots):
        self.base, self.app_key, self.admin_key, self.shots = base, app_key, admin_key, shots
        self.errors = []
        # Console errors the check provokes on purpose (a 409 it wants to see rendered); anything else fails.
        self.expected_failed_requests = 0
        self.screenshots = []

    def api(self, method, path, body=None, admin=False, app=None):
        """Calls the API with the app key (or the admin key, acting for `app` when given); returns the JSON answer."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", "Bearer " + (self.admin_key if admin else self.app_key))
        if app:
            request.add_header("Parley-App-Id", app)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def status(self, method, path, admin=False):
        """The HTTP status of a call (for the ones expected to fail, such as reading a deleted app)."""
        try:
            self.api(method, path, admin=admin)
            return 200
        except urllib.error.HTTPError as error:
            return error.code

    def upload(self, name, data):
        request = urllib.request.Request(self.base + "/v1/files?user_id=bob", data=data, method="POST")
        request.add_header("Authorization", "Bearer " + self.app_key)
        request.add_header("Parley-File-Name", name)
        request.add_header("Content-Type", "application/octet-stream")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def send(self, sender, kind, to, text, **extra):
        return self.api("POST", "/v1/messages", {"from": sender, "conversation_type": kind, "to": to, "type": 1,
                                                 "body": {"text": text}, **extra})

    def watch(self, page):
        def on_console(message):
            if message.type != "error":
                return
            if "Failed to load resource" in message.text and self.expected_failed_requests > 0:
                self.expected_failed_requests -= 1
                return
            self.errors.append(f"console error: {message.text} ({message.location})")

        page.on("console", on_console)
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))

    def shot(self, page, name):
        path = os.path.join(self.shots, f"{name}.png")
        page.screenshot(path=path, full_page=True)
        self.screenshots.append(path)

    def screen(self, page, hash_, title):
        page.click(f'#nav a[href="{hash_}"]')
        page.wait_for_selector(f"#screen-title:text-is('{title}')")

    def submit(self, page, form):
        page.click(f'form[aria-label="{form}"] button[type=submit]')

    def provoke(self, page, count=1):
        """The next `count` requests fail on purpose (Chromium logs each as a console error)."""
        self.expected_failed_requests += count

    def problem(self, page, *expected):
        page.wait_for_selector("#problem:not([hidden])")
        text = page.inner_text("#problem")
        for part in expected:
            assert part in text, f"{part!r} not in the problem: {text}"
        assert "null" not in text and "undefined" not in text, text
        return text

    def confirm(self, page, typed=None):
        """Answers the confirmation dialog; a delete's Confirm stays disabled until its id is typed."""
        dialog = page.locator("dialog.confirm[open]")
        dialog.wait_for()
        if typed is not None:
            assert page.is_disabled("dialog.confirm button:text-is('Confirm')"), "Confirm enabled before the id was typed"
            page.fill("#confirm-typed", typed)
        page.click("dialog.confirm button:text-is('Confirm')")
        dialog.wait_for(state="detached")

    def field_error(self, page, control_id, words):
        """The server's complaint is shown on the control itself, which is marked invalid."""
        page.wait_for_selector(f"#{control_id}[aria-invalid=true]")
        note = page.inner_text(f"#{control_id}-error")
        assert words in note, f"field error of {control_id}: {note!r}"

    def panel_ids(self, page):
        return page.eval_on_selector_all("#event-list li[data-event-id]", "items => items.map(i => i.dataset.eventId)")

    def sign_in(self, page, key, title):
        page.fill("#credential", key)
        page.keyboard.press("Enter")
        page.wait_for_selector(f"#screen-title:text-is('{title}')")

    def manage(self, page, user_id):
        """Opens a user's page and waits until it replaced the previous one (whose forms have the same ids)."""
        page.click(f"main tr:has(code:text-is('{user_id}')) button:text('Manage')")
        page.wait_for_selector(f"section[aria-label='Selected user'] h3:has(code:text-is('{user_id}'))")

    def open_conversation(self, page, user, kind, other):
        self.screen(page, "#conversation", "Conversation")
        page.fill("#conv-user", user)
        page.select_option("#conv-type", kind)
        page.fill("#conv-id", other)
        self.submit(page, "Open a conversation")
        page.wait_for_selector("#send-text")

    # MARK: - App key

    def run(self, page):
        print("sign in with the app key")
        page.goto(self.base + "/console")
        page.wait_for_selector("#credential")
        assert not page.is_visible("#nav") and not page.is_visible("#sign-out"), "signed-in chrome shown before sign-in"
        self.shot(page, "01-sign-in")
        # Keyboard only: the screen's heading has focus, Tab reaches the key field, Enter submits.
        assert page.evaluate("document.activeElement.id") == "screen-title"
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == "credential"
        page.keyboard.type(self.app_key)
        page.keyboard.press("Enter")
        page.wait_for_selector("#screen-title:text-is('Users')")
        wait_connected(page)
        page.wait_for_selector("main .empty:has-text('No users yet')")

        self.users(page)
        self.groups(page)
        self.conversation(page)
        self.messages_in_words(page)
        self.search(page)
        self.settings(page, "#settings", "")

        print("apps with the app key: managed with the admin key; stats and health")
        assert page.is_hidden("#nav a[href='#apps']"), "the Apps link is shown to an app key"
        page.goto(self.base + "/console#apps")
        page.wait_for_selector("main .empty:has-text('managed with the server admin key')")
        self.screen(page, "#stats", "Stats and health")
        page.wait_for_selector("dl.stats dt:text('users total')")
        self.shot(page, "12-stats")

        self.admin(page)
        self.accessibility_and_phone(page)
        if self.errors:
            raise AssertionError("\n".join(self.errors))

    def users(self, page):
        print("users: create, sort, mute, token, kick (confirmed)")
        for user_id, name in [("alice", "Alice"), ("bob", "Bob"), ("carol", "Carol"), ("dave", "Dave")]:
            page.fill("#new-user-id", user_id)
            page.fill("#new-user-name", name)
            self.submit(page, "New user")
            page.wait_for_selector(f"#notice:has-text('User {user_id} created.')")
        page.wait_for_selector("main td code:text-is('dave')")
        # Sortable: the header is a button; the sorted column carries aria-sort.
        page.click("main th button:text-is('User id')")
        assert page.get_attribute("main th:has(button:text-is('User id'))", "aria-sort") == "ascending"
        page.click("main th button:text-is('User id')")
        assert page.get_attribute("main th:has(button:text-is('User id'))", "aria-sort") == "descending"
        assert page.inner_text("main tbody tr:first-child td:first-child") == "dave", "descending sort did not put dave first"
        page.click("main tr:has(code:text-is('alice')) button:text('Manage')")
        page.wait_for_selector("form[aria-label='Issue a token']")
        assert "user=alice" in page.url, f"the selected user is not in the URL: {page.url}"
        self.submit(page, "Issue a token")
        page.wait_for_selector(".secret:has-text('Token for alice')")
        page.fill("#mute-duration", "600")
        self.submit(page, "Mute user")
        page.wait_for_selector("#notice:has-text('Mute of alice updated.')")
        assert self.api("GET", "/v1/users/alice")["muted_until"] > 0, "alice not muted"
        page.fill("#mute-duration", "0")
        self.submit(page, "Mute user")
        page.wait_for_selector("main tr:has(code:text-is('alice')) td:nth-child(3):text-is('no')")
        page.click("button:text('Kick (close streams, revoke tokens)')")
        self.confirm(page)
        page.wait_for_selector("#notice:has-text('alice kicked')")
        # The user's devices and event log.
        self.api("POST", "/v1/users/alice/devices", {"device_id": "phone-1", "platform": "android", "provider": "fcm",
                                                      "push_key": "fcm-token-1", "app_id": "com.example.chat"})
        page.reload()
        page.wait_for_selector("section[aria-label='Push devices'] td code:text-is('phone-1')")
        page.wait_for_selector("section[aria-label='Event log of the user'] td:text-is('user.kicked')")
        self.shot(page, "02-users")

        print("a problem is shown readably (duplicate user → 409 7000101), field errors on their fields")
        self.provoke(page)
        page.fill("#new-user-id", "alice")
        self.submit(page, "New user")
        self.problem(page, "409", "7000101", "user alice already exists")
        self.shot(page, "03-problem")
        self.provoke(page)
        page.fill("#edit-avatar", "https://example.com/" + "a" * 500)
        self.submit(page, "Edit user")
        self.field_error(page, "edit-avatar", "500")

        print("ban (confirmed, with a refused reason first), unban")
        self.manage(page, "bob")
        page.wait_for_selector("form[aria-label='Ban user']")
        self.provoke(page)
        page.fill("#ban-reason", "é" * 200)  # 400 bytes: within the field's 256 characters, over the API's 256 bytes
        self.submit(page, "Ban user")
        self.confirm(page)
        self.field_error(page, "ban-reason", "256")
        page.fill("#ban-reason", "spam")
        self.submit(page, "Ban user")
        self.confirm(page)
        page.wait_for_selector("#notice:has-text('bob banned.')")
        assert self.api("GET", "/v1/users/bob")["banned_until"] != 0, "bob not banned"
        page.click("button:text('Unban bob')")
        page.wait_for_selector("#notice:has-text('bob unbanned.')")
        assert self.api("GET", "/v1/users/bob")["banned_until"] == 0, "bob still banned"

        print("delete (typed id), a deleted user's Manage, restore")
        self.manage(page, "dave")
        page.click("button:text-is('Delete…')")
        self.confirm(page, typed="dave")
        page.wait_for_selector("#notice:has-text('dave deleted (restorable).')")
        assert self.api("GET", "/v1/users/dave?include_deleted=true")["deleted_at"], "dave not deleted"
        page.select_option("#user-state", "deleted")
        self.submit(page, "Search users")
        self.manage(page, "dave")
        page.wait_for_selector("section[aria-label='Selected user'] p:has-text('State: deleted')")
        page.click("button:text('Restore dave')")
        page.wait_for_selector("#notice:has-text('dave restored.')")
        assert self.api("GET", "/v1/users/dave")["deleted_at"] is None, "dave not restored"
        # The URL keeps the filter and the selection: opening it draws the same screen.
        assert "state=deleted" in page.url and "user=dave" in page.url, page.url
        page.goto(self.base + "/console#users?state=banned&user=bob")
        page.wait_for_selector("section[aria-label='Selected user'] h3:has-text('bob')")
        assert page.input_value("#user-state") == "banned"
        page.wait_for_selector("main .empty:has-text('No user matches this search')")

    def groups(self, page):
        print("groups: create, add members (one unknown), role, member mute, remove, dismiss")
        self.screen(page, "#groups", "Groups")
        page.wait_for_selector("main .empty:has-text('No groups yet')")
        for group_id, members in [("team", "bob"), ("temp", "")]:
            page.fill("#group-id", group_id)
            page.fill("#group-name", group_id.title())
            page.fill("#group-owner", "alice")
            page.fill("#group-members", members)
            self.submit(page, "New group")
            page.wait_for_selector(f"#notice:has-text('Group {group_id} created.')")
        page.click("main tr:has(code:text-is('team')) button:text('Members')")
        page.wait_for_selector("section[aria-label='Selected group'] td code:text-is('bob')")
        # Bug: a 200 batch with a failed item showed "nobody-here: undefined".
        page.fill("#invite-ids", "carol, dave, nobody-here")
        self.submit(page, "Add members")
        self.problem(page, "Some users were not added: 1 of 3", "nobody-here", "user nobody-here does not exist", "6000011")
        page.wait_for_selector("section[aria-label='Selected group'] td code:text-is('carol')")
        page.fill("#role-user", "bob")
        page.select_option("#role-value", "2")
        self.submit(page, "Set a member's role")
        page.wait_for_selector("#notice:has-text('bob is now an admin of team.')")
        assert self.api("GET", "/v1/groups/team/members/bob")["role"] == 2, "bob is not an admin"
        self.provoke(page)
        page.fill("#role-user", "nobody-here")
        self.submit(page, "Set a member's role")
        self.problem(page, "403", "6000521", "user nobody-here is not a member of group team")
        page.fill("#member-mute-user", "carol")
        page.fill("#member-mute-duration", "600")
        self.submit(page, "Mute a member")
        page.wait_for_selector("#notice:has-text('Mute of carol in team updated.')")
        assert self.api("GET", "/v1/groups/team/members/carol")["muted_until"] > 0, "carol not muted in team"
        page.fill("#member-mute-user", "nobody-here")
        self.submit(page, "Mute a member")
        self.problem(page, "The mute was not set: 1 of 1", "nobody-here")
        page.click("section[aria-label='Selected group'] button:text('Remove dave')")
        self.confirm(page)
        page.wait_for_selector("#notice:has-text('dave removed from team.')")
        members = [m["user_id"] for m in self.api("GET", "/v1/groups/team/members")["items"]]
        assert "dave" not in members and "carol" in members, members
        self.shot(page, "04-groups")
        page.goto(self.base + "/console#groups?group=temp")
        page.wait_for_selector("section[aria-label='Selected group'] h3:has-text('temp')")
        page.click("button:text('Dismiss temp…')")
        self.confirm(page, typed="temp")
        page.wait_for_selector("#notice:has-text('Group temp dismissed.')")
        assert self.api("GET", "/v1/groups/temp")["dismissed_at"], "temp not dismissed"

    def conversation(self, page):
        print("open a conversation and send from the console")
        self.open_conversation(page, "alice", "peer", "bob")
        page.wait_for_selector("main .empty:has-text('No messages yet')")
        assert "user=alice" in page.url and "id=bob" in page.url, page.url
        text = f"hello from the console {time.time_ns()}"
        page.fill("#send-text", text)
        started = time.monotonic()
        page.keyboard.press("Enter")
        page.wait_for_selector(f"#event-list li:has-text('{text}')", timeout=int(LIVE_DEADLINE_S * 1000))
        elapsed = time.monotonic() - started
        print(f"  the message reached the live panel in {elapsed * 1000:.0f} ms")
        assert elapsed <= LIVE_DEADLINE_S, f"live panel took {elapsed:.3f} s"
        page.wait_for_selector(f".messages li:has-text('{text}')")
        # History paging: enough messages for a second page, then the "Older messages" button walks back to the first.
        for i in range(25):
            self.send("bob", "peer", "alice", f"filler {i}")
        self.submit(page, "Open a conversation")
        page.wait_for_selector("button:text('Older messages'):visible")
        page.click("button:text('Older messages')")
        page.wait_for_selector(f".messages li:has-text('{text}')")
        count = page.eval_on_selector_all(".messages li", "items => items.length")
        assert count == 26, f"{count} messages after paging back, expected 26"

        print("reload: the panel resumes with no duplicate and no gap")
        page.wait_for_selector("#event-list li:has-text('filler 24')")
        before = self.panel_ids(page)
        sent_while_away = {}

        def write_while_away(route):
            # The reloaded page has not reconnected yet: this event is one it must catch up on, not see live.
            sent_while_away.update(self.send("bob", "peer", "alice", "sent while the page was away"))
            route.continue_()

        page.route("**/v1/events", write_while_away, times=1)
        page.reload()
        page.wait_for_selector(f"#live-status:text-is('Connected: resumed after event {before[-1]}.')")
        after_reload = self.send("alice", "peer", "bob", "sent after the reload")
        page.wait_for_selector("#event-list li:has-text('sent after the reload')")
        ids = self.panel_ids(page)
        assert ids[: len(before)] == before, "the panel lost events it showed before the reload"
        assert len(ids) == len(set(ids)), f"duplicate events in the panel: {ids}"
        assert [int(i) for i in ids] == sorted(int(i) for i in ids), f"events out of order: {ids}"
        log = self.api("GET", f"/v1/events/log?after={int(ids[0]) - 1}&limit=100")
        expected = [item["id"] for item in log["items"] if int(item["id"]) <= int(ids[-1])]
        assert ids == expected, f"the panel {ids} is not the event log {expected}"
        for message in (sent_while_away, after_reload):
            shown = page.locator(f"#event-list li:has-text('{message['body']['text']}')").count()
            assert shown == 1, f"{message['body']['text']!r} shown {shown} times"
        print(f"  {len(before)} events before the reload, {len(ids)} after, same as the event log")

        print("a send to someone who blacklisted the sender is marked suppressed at once")
        self.api("POST", "/v1/users/bob/blacklist", {"user_ids": ["alice"]})
        page.wait_for_selector("#send-text")
        page.fill("#send-text", "you will never see this")
        page.keyboard.press("Enter")
        page.wait_for_selector(".messages li:has-text('you will never see this') .badge:text-is('suppressed: blacklist')")
        page.wait_for_selector("#notice:has-text('suppressed (blacklist)')")
        self.api("DELETE", "/v1/users/bob/blacklist/alice")

        print("an image and a file message render as a thumbnail and a link")
        image = self.upload("photo.jpg", jpeg(96, 64))
        document = self.upload("notes.txt", b"remember the milk\n")
        self.api("POST", "/v1/messages", {"from": "bob", "conversation_type": "peer", "to": "alice", "type": 11,
                                          "body": {"file_id": image["file_id"]}})
        self.api("POST", "/v1/messages", {"from": "bob", "conversation_type": "peer", "to": "alice", "type": 12,
                                          "body": {"file_id": document["file_id"]}})
        self.open_conversation(page, "alice", "peer", "bob")
        page.wait_for_selector(".messages li a.media:has-text('notes.txt')")
        thumbnail = page.locator(".messages li a.media img[alt='photo.jpg']")
        thumbnail.wait_for()
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=thumbnail.element_handle())
        width = thumbnail.evaluate("img => img.naturalWidth")
        assert width == 96, f"the thumbnail decoded {width} px wide, expected 96 (never enlarged)"
        self.shot(page, "05-conversation")

    def messages_in_words(self, page):
        print("group history: tips and revokes in words, replies, reactions; pin, revoke, delete for everyone")
        by_alice = self.send("alice", "group", "team", "a slip of the keyboard")
        self.api("POST", f"/v1/messages/{by_alice['message_id']}/revoke", {"operator": "alice"})
        root = self.send("bob", "group", "team", "lunch at noon?")
        self.send("alice", "group", "team", "count me in", reply_to=root["message_id"])
        self.api("POST", f"/v1/messages/{root['message_id']}/reactions", {"user_id": "alice", "reaction_type": "thumbs_up"})
        victims = [self.send("bob", "group", "team", f"to be {what}") for what in ("revoked", "deleted")]
        self.open_conversation(page, "alice", "group", "team")
        messages = page.locator(".messages")
        for words in ("alice created the group with bob", "carol, dave joined the group", "the app made bob an admin",
                      "the app muted carol", "dave was removed from the group", "alice revoked a message"):
            messages.locator(f".notice-line:has-text('{words}')").first.wait_for()
        assert "[type 3" not in page.inner_text(".messages"), "a revoke or tips message is shown by its number"
        page.wait_for_selector(f"li[data-message-id='{root['message_id']}'] .badge:text-is('thumbs_up 1')")
        page.wait_for_selector("blockquote.reply:has-text('In reply to bob: lunch at noon?')")
        page.click(f"li[data-message-id='{root['message_id']}'] button:text-is('Pin')")
        page.wait_for_selector(f"li[data-message-id='{root['message_id']}'] .badge:text-is('pinned')")
        assert self.api("GET", f"/v1/messages/{root['message_id']}")["pinned"], "the message is not pinned"
        revoked, deleted = (v["message_id"] for v in victims)
        page.click(f"li[data-message-id='{revoked}'] button:text-is('Revoke')")
        self.confirm(page)
        page.wait_for_selector(f"li[data-message-id='{revoked}'] .notice-line:has-text('the app revoked a message from bob')")
        assert self.api("GET", f"/v1/messages/{revoked}")["type"] == 31, "the message is not revoked"
        page.click(f"li[data-message-id='{deleted}'] button:text('Delete for everyone')")
        self.confirm(page, typed=deleted)
        page.wait_for_selector(f"li[data-message-id='{deleted}']:has-text('(deleted for everyone)')")
        assert self.api("GET", f"/v1/messages/{deleted}")["deleted"], "the message is not deleted"
        self.shot(page, "06-group-history")

    def search(self, page):
        print("message search, its URL and a refused search")
        self.screen(page, "#search", "Message search")
        page.fill("#search-q", "lunch noon")
        self.submit(page, "Search messages")
        # The screen first lists every message (an empty search): wait for the one hit alone.
        page.wait_for_selector("main tbody:has(tr:has-text('lunch at noon?')):not(:has(tr:nth-child(2)))")
        assert "q=lunch+noon" in page.url or "q=lunch%20noon" in page.url, page.url
        page.goto(self.base + "/console#search?q=slip&user_id=alice")
        page.wait_for_selector("main .empty:has-text('No message matches')")  # revoked messages are never found
        assert page.input_value("#search-user") == "alice"
        self.provoke(page)
        page.fill("#search-q", "one two three four five six")
        self.submit(page, "Search messages")
        self.problem(page, "400", "6000001")
        page.fill("#search-q", "filler")
        page.fill("#search-user", "")
        self.submit(page, "Search messages")
        page.wait_for_selector("main tbody tr:has-text('filler 24')")
        self.shot(page, "07-search")

    def settings(self, page, hash_, app, admin=False):
        """Changes one setting and reads it back; a value the server refuses is shown on its field."""
        print(f"settings of {app or 'this app'}")
        if hash_ == "#settings":
            self.screen(page, hash_, "App settings")
        else:
            page.goto(self.base + "/console" + hash_)
            page.wait_for_selector("#screen-title:text-is('App settings')")
        page.wait_for_selector("#set-revoke_window_s")
        self.provoke(page)
        page.fill("#set-room_offline_leave_s", "5")  # within the field's 0–86400, but the API takes 0 or 10–86400
        self.submit(page, "App settings")
        self.field_error(page, "set-room_offline_leave_s", "10")
        page.fill("#set-room_offline_leave_s", "0")
        page.fill("#set-revoke_window_s", "300")
        page.fill("#set-sensitive_words", "darn\nheck")
        page.check("#set-push-event_id_only")
        self.submit(page, "App settings")
        page.wait_for_selector("#notice:has-text('Saved revoke_window_s, sensitive_words, push')")
        path = f"/v1/apps/{app}/settings" if admin else "/v1/settings"
        settings = self.api("GET", path, admin=admin)
        assert settings["revoke_window_s"] == 300 and settings["sensitive_words"] == ["darn", "heck"], settings
        assert settings["push"]["event_id_only"] is True and settings["room_offline_leave_s"] == 0, settings["push"]
        self.shot(page, f"08-settings{'-admin' if admin else ''}")
        # The app is left as found: the operations check that runs next on this server sends ordinary text ("check"
        # holds "heck", and sensitive words match inside words).
        self.api("PATCH", path, {"sensitive_words": []}, admin=admin)

    # MARK: - Admin key

    def admin(self, page):
        print("sign in with the admin key: an app screen before choosing an app says what to do")
        page.click("#sign-out")
        page.wait_for_selector("#credential")
        self.sign_in(page, self.admin_key, "Apps and keys")
        self.screen(page, "#users", "Users")
        page.wait_for_selector("main .empty a[href='#apps']")
        assert page.is_hidden("#problem"), page.inner_text("#problem")
        self.shot(page, "09-choose-app")
        page.click("main .empty a[href='#apps']")
        page.wait_for_selector("#screen-title:text-is('Apps and keys')")

        print("apps and keys: create an app, a key, revoke it (confirmed), its settings, delete it (typed id)")
        self.provoke(page)
        page.fill("#app-id", "default")
        page.fill("#app-name", "Clash")
        self.submit(page, "New app")
        self.problem(page, "409")
        page.fill("#app-id", "ops2")
        page.fill("#app-name", "Second")
        self.submit(page, "New app")
        page.wait_for_selector("#notice:has-text('App ops2 created.')")
        page.click("main tr:has(code:text-is('ops2')) button:text('Keys')")
        page.fill("#key-name", "ci")
        self.submit(page, "New key")
        page.wait_for_selector("#notice:has-text('New key (shown only now)')")
        key = next(k for k in self.api("GET", "/v1/apps/ops2/keys", admin=True)["items"] if k["name"] == "ci")
        page.click(f"section[aria-label='Keys of the selected app'] tr:has(code:text-is('{key['key_id']}')) button:text('Revoke')")
        self.confirm(page)
        page.wait_for_selector(f"#notice:has-text('Key {key['key_id']} revoked.')")
        key = next(k for k in self.api("GET", "/v1/apps/ops2/keys", admin=True)["items"] if k["key_id"] == key["key_id"])
        assert key["revoked_at"], "the key is not revoked"
        self.shot(page, "10-apps")
        self.settings(page, "#settings?app=ops2", "ops2", admin=True)
        page.goto(self.base + "/console#apps?app=ops2")
        page.click("button:text('Delete app ops2…')")
        self.confirm(page, typed="ops2")
        page.wait_for_selector("#notice:has-text('App ops2 deleted.')")
        assert self.status("GET", "/v1/apps/ops2", admin=True) == 404, "ops2 still exists"

        print("acting for the app: every app screen with the admin key")
        page.click("main tr:has(code:text-is('default')) button:text('Act for this app')")
        page.wait_for_selector("#identity-text:has-text('acting for app default')")
        wait_connected(page)
        page.goto(self.base + "/console#users?state=all&user=dave")
        page.wait_for_selector("section[aria-label='Push devices']")
        self.manage(page, "carol")
        page.fill("#mute-duration", "60")
        self.submit(page, "Mute user")
        page.wait_for_selector("#notice:has-text('Mute of carol updated.')")
        assert self.api("GET", "/v1/users/carol")["muted_until"] > 0, "carol not muted by the admin key"
        page.goto(self.base + "/console#groups?group=team")
        page.wait_for_selector("section[aria-label='Selected group'] td code:text-is('carol')")
        page.fill("#member-mute-user", "carol")
        page.fill("#member-mute-duration", "0")
        self.submit(page, "Mute a member")
        page.wait_for_selector("#notice:has-text('Mute of carol in team updated.')")
        assert self.api("GET", "/v1/groups/team/members/carol")["muted_until"] == 0, "carol still muted in team"
        page.goto(self.base + "/console#conversation?user=alice&type=group&id=team")
        page.wait_for_selector(".notice-line:has-text('alice revoked a message')")
        page.fill("#send-text", "sent by the admin key")
        page.keyboard.press("Enter")
        page.wait_for_selector(".messages li:has-text('sent by the admin key')")
        page.goto(self.base + "/console#search?q=admin")
        page.wait_for_selector("main tbody tr:has-text('sent by the admin key')")
        self.screen(page, "#settings", "App settings")
        page.wait_for_selector("#set-revoke_window_s[value='300']")
        self.screen(page, "#stats", "Stats and health")
        page.wait_for_selector("dl.stats dt:text('users total')")

    # MARK: - Every screen: accessible names, 390 px

    SCREENS = [
        ("apps", "#apps?app=default", "section[aria-label='Keys of the selected app'] table"),
        ("settings", "#settings", "#set-revoke_window_s"),
        ("users", "#users?user=alice", "section[aria-label='Event log of the user'] table"),
        ("groups", "#groups?group=team", "section[aria-label='Selected group'] table"),
        ("conversation", "#conversation?user=alice&type=group&id=team", ".messages li"),
        ("search", "#search?q=filler", "main tbody tr"),
        ("stats", "#stats", "dl.stats dt"),
    ]

    def accessibility_and_phone(self, page):
        print("every screen: no unnamed control; at 390 px the page never scrolls sideways")
        for width in (1280, 390):
            page.set_viewport_size({"width": width, "height": 800})
            for name, hash_, ready in self.SCREENS:
                page.goto(self.base + "/console" + hash_)
                page.wait_for_selector(ready)
                if width == 1280:
                    unnamed = unnamed_controls(page.locator("body").aria_snapshot())
                    assert not unnamed, f"{name}: controls without an accessible name: {unnamed}"
                else:
                    scroll = page.evaluate("document.documentElement.scrollWidth")
                    assert scroll <= 390, f"{name} at 390 px is {scroll} px wide"
                    self.shot(page, f"13-phone-{name}")
        page.set_viewport_size({"width": 1280, "height": 800})


def drive(check, failure_name):
    """Runs `check.run(page)` in Debian's Chromium, headless; on a failure saves the page as `failure_name` in the
    screenshot directory and prints what the console said. console_check_ops.py drives its check with this too."""
    executable = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if not executable:
        sys.exit("no chromium executable (apt-get install chromium, or set CHROMIUM)")
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium refuses its sandbox; containers often have a tiny /dev/shm.
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox", "--disable-dev-shm-usage"],
                                             timeout=30_000)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(STEP_TIMEOUT_MS)
            check.watch(page)
            try:
                check.run(page)
            except Exception:
                # What the page showed when the check failed, and what the console said before it.
                page.screenshot(path=os.path.join(check.shots, failure_name), full_page=True)
                print("\n".join(check.errors) or "no console errors", file=sys.stderr)
                raise
        finally:
            browser.close()


def main():
    started = time.monotonic()
    base, app_key, admin_key, shots = sys.argv[1:5]
    os.makedirs(shots, exist_ok=True)
    check = Check(base, app_key, admin_key, shots)
    drive(check, "failure.png")
    print(f"  {len(check.screenshots)} screenshots in {shots}")
    print(f"console check passed in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
