#!/usr/bin/env python3
"""Drives the console's operations screens (console/ops.js) and Activity charts (console/charts.js) in Debian's
Chromium, headless, through playwright.

usage: console_check_ops.py <base url> <app key> <admin key> <screenshot dir>

Creates what it needs through the API, then with the app key visits every operations screen, does each action once
and checks its effect through the API, provokes a problem on every form and checks it is shown (on the field when the
problem names one); draws the Activity charts from a known series (GET /v1/stats/series mocked in the browser only)
and maps every polyline point back to its bucket and value, nulls being gaps; then signs in with the admin key, acts
for the app "default" and opens every screen from a URL that holds its filters and selection (after a reload, so the
URL alone restores them). Accessibility: every button, textbox, combobox, checkbox and link has a name (aria
snapshot); at 390 px no screen scrolls sideways. Fails on any JavaScript error or any failed request it did not
provoke. Screenshots go to <screenshot dir>/ops-*.png. Started by scripts/console-check.sh after console_check.py,
against the same server.
"""
import json
import math
import os
import re
import sys
import time
import urllib.error
import urllib.request

from console_check import drive

LONG_ID = "x" * 40  # over every id's 32-byte limit: a 400 naming the field

SCREENS = [("rooms", "Rooms"), ("calls", "Calls"), ("webhooks", "Webhooks"), ("push", "Push"), ("eventlog", "Event log"),
           ("files", "Files"), ("moderation", "Moderation"), ("blocklists", "Blocklists"), ("retention", "Retention"),
           ("jobs", "Jobs"), ("activity", "Activity")]
UNNAMED = re.compile(r'^\s*- (button|textbox|combobox|checkbox|link|searchbox|spinbutton)(?:\s*""|)\s*(?::.*|\[.*)?$')


def known_series(range_):
    """A series with every kind of value: integers, fractions, runs cut by nulls, an isolated point, an all-null metric."""
    count, step = (60, 60) if range_ == "1h" else (168, 3600)
    end = (int(time.time()) // step) * step * 1000
    start = end - (count - 1) * step * 1000

    def values(f, nulls=()):
        return [None if i in nulls else f(i) for i in range(count)]

    series = {
        "messages": values(lambda i: (i * 7) % 23, nulls={10, 11, 30, 44, 46}),
        "active_users": values(lambda i: 3 + i % 5),
        "streams_open": [None] * count,
        "webhook_backlog": values(lambda i: max(0, 40 - i), nulls=set(range(20, 25))),
        "webhook_latency_ms": values(lambda i: round(12.5 + (i % 9) * 3.25, 2), nulls={0, count - 1}),
        "push_sent": values(lambda i: i * 2),
        "push_failed": values(lambda i: 0),
        "http_4xx": values(lambda i: i % 3),
        "http_5xx": values(lambda i: 1 if i == count // 2 else 0),
    }
    return {"range": range_, "step_s": step, "from": start, "to": start + count * step * 1000,
            "generated_at": int(time.time() * 1000), "series": series}


class OpsCheck:
    def __init__(self, base, app_key, admin_key, shots):
        self.base, self.app_key, self.admin_key, self.shots = base, app_key, admin_key, shots
        self.errors = []
        self.expected_failures = 0
        self.mocked = {}

    # MARK: - API (as the app, to set up and to check effects)

    def api(self, method, path, body=None, ok=(200, 201, 202, 204)):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", "Bearer " + self.app_key)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            if error.code in ok:
                return None
            raise AssertionError(f"{method} {path}: {error.code} {error.read()[:300]!r}")

    def api_status(self, method, path):
        request = urllib.request.Request(self.base + path, method=method)
        request.add_header("Authorization", "Bearer " + self.app_key)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    def ensure_user(self, user_id):
        try:
            self.api("POST", "/v1/users", {"user_id": user_id, "name": user_id.title()})
        except AssertionError as error:
            if " 409 " not in str(error):
                raise

    def setup(self):
        for user in ("alice", "bob", "carol", "dave"):
            self.ensure_user(user)
        self.api("POST", "/v1/rooms", {"room_id": "ops-lobby", "name": "Ops lobby", "creator": "alice",
                                        "attributes": {"topic": "Welcome"}, "destroy_delay_s": 300})
        self.api("POST", "/v1/rooms/ops-lobby/enter", {"user_id": "bob", "extended_data": "seat 3"})
        self.api("POST", "/v1/rooms/ops-lobby/member_attributes",
                 {"operator": "alice", "user_ids": ["bob"], "attributes": {"seat": "3"}})
        self.api("POST", "/v1/rooms", {"room_id": "ops-doomed", "name": "Doomed", "creator": "carol"})
        call = self.api("POST", "/v1/calls", {"caller": "alice", "invitees": ["bob", "carol"], "mode": "advanced", "timeout_s": 600})
        self.call_id = call["call"]["call_id"]
        self.api("POST", f"/v1/calls/{self.call_id}/accept", {"user_id": "bob"})
        general = self.api("POST", "/v1/calls", {"caller": "carol", "invitees": ["dave"], "timeout_s": 600})
        self.general_call_id = general["call"]["call_id"]
        self.message = self.api("POST", "/v1/messages", {"from": "alice", "conversation_type": "peer", "to": "bob", "type": 1,
                                                          "body": {"text": "ops check hello"}})
        request = urllib.request.Request(self.base + "/v1/files?user_id=bob", data=b"ops check notes\n", method="POST")
        request.add_header("Authorization", "Bearer " + self.app_key)
        request.add_header("Parley-File-Name", "ops-notes.txt")
        request.add_header("Content-Type", "text/plain")
        with urllib.request.urlopen(request, timeout=10) as response:
            self.file_id = json.loads(response.read())["file_id"]
        self.api("POST", "/v1/users/bob/devices", {"device_id": "ops-phone", "platform": "android", "provider": "fcm",
                                                   "push_key": "ops-key-1", "app_id": "com.example.ops"})

    # MARK: - Page helpers

    def watch(self, page):
        def on_console(message):
            if message.type != "error":
                return
            if "Failed to load resource" in message.text and self.expected_failures > 0:
                self.expected_failures -= 1
                return
            self.errors.append(f"console error: {message.text} ({message.location})")

        page.on("console", on_console)
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))

    def shot(self, page, name):
        page.screenshot(path=os.path.join(self.shots, f"ops-{name}.png"), full_page=True)

    def open(self, page, screen, query=""):
        title = dict(SCREENS)[screen]
        page.goto(f"{self.base}/console#{screen}{query}")
        if query:
            # A reload draws the screen from the URL alone: what a shared link or a bookmark gets.
            page.reload()
        page.wait_for_selector(f"#screen-title:text-is('{title}')")

    def nav(self, page, screen):
        page.click(f'#nav a[href="#{screen}"]')
        page.wait_for_selector(f"#screen-title:text-is('{dict(SCREENS)[screen]}')")

    def submit(self, page, label):
        page.click(f'form[aria-label="{label}"] button[type=submit]')

    def notice(self, page, text):
        page.wait_for_selector(f"#notice:not([hidden]):has-text({json.dumps(text)})")

    def confirm(self, page, typed=None):
        page.wait_for_selector("dialog.confirm[open]")
        if typed is not None:
            page.fill("#confirm-typed", typed)
        page.click("dialog.confirm button[type=submit]")
        page.wait_for_selector("dialog.confirm", state="detached")

    def problem(self, page, label, fills, field=None, text=None, requests=1, confirm=False):
        """Submits a form with a bad value and checks the problem is shown, and on the field when it names one."""
        self.expected_failures += requests
        for selector, value in fills.items():
            if isinstance(value, bool):
                page.set_checked(selector, value)
            elif selector.startswith("select:"):
                page.select_option(selector[len("select:"):], value)
            else:
                page.fill(selector, value)
        self.submit(page, label)
        if confirm:
            self.confirm(page)
        page.wait_for_selector("#problem:not([hidden])")
        shown = page.inner_text("#problem")
        assert "undefined" not in shown and "null" not in shown, shown
        if text:
            assert text in shown, f"{label}: expected {text!r} in {shown!r}"
        if field:
            page.wait_for_selector(f'form[aria-label="{label}"] {field}[aria-invalid=true]')
            page.wait_for_selector(f'form[aria-label="{label}"] .field-error')
        self.problems += 1

    def accessibility(self, page, name):
        snapshot = page.locator("body").aria_snapshot()
        unnamed = [line.strip() for line in snapshot.splitlines() if UNNAMED.match(line)]
        assert not unnamed, f"{name}: controls without an accessible name: {unnamed}"

    # MARK: - Screens, with the app key

    def rooms(self, page):
        self.nav(page, "rooms")
        page.wait_for_selector("main td code:text-is('ops-lobby')")
        page.click("button[aria-label='Inspect room ops-lobby']")
        page.wait_for_selector("section[aria-label='Selected room'] td code:text-is('bob')")
        page.wait_for_selector("section[aria-label='Selected room'] td code:text-is('topic')")
        assert "room=ops-lobby" in page.url, page.url
        page.fill("#room-attr-key", "song")
        page.fill("#room-attr-value", "intro")
        self.submit(page, "Set a room attribute")
        self.notice(page, "Attribute song set.")
        attributes = {a["key"]: a["value"] for a in self.api("GET", "/v1/rooms/ops-lobby/attributes")["attributes"]}
        assert attributes.get("song") == "intro", attributes
        page.click("button[aria-label='Delete attribute song']")
        self.confirm(page)
        page.wait_for_selector("button[aria-label='Delete attribute song']", state="detached")
        assert "song" not in {a["key"] for a in self.api("GET", "/v1/rooms/ops-lobby/attributes")["attributes"]}
        page.click("button[aria-label='Kick bob from room ops-lobby']")
        self.confirm(page)
        page.wait_for_selector("button[aria-label='Kick bob from room ops-lobby']", state="detached")
        assert "bob" not in [m["user_id"] for m in self.api("GET", "/v1/rooms/ops-lobby/members")["items"]]
        page.fill("#room-id", "ops-new")
        page.fill("#room-creator", "dave")
        self.submit(page, "New room")
        self.notice(page, "Room ops-new created.")
        assert self.api("GET", "/v1/rooms/ops-new")["room_id"] == "ops-new"
        self.problem(page, "New room", {"#room-id": "ops-bad", "#room-delay": "99999"}, field="#room-delay")
        self.problem(page, "Set a room attribute", {"#room-attr-key": "k", "#room-attr-operator": "bad operator"}, field="#room-attr-operator")
        self.problem(page, "Search rooms", {"#room-q": "a\u0000b"}, field="#room-q")
        self.shot(page, "rooms-app")

    def calls(self, page):
        self.nav(page, "calls")
        page.wait_for_selector("main p.empty:has-text('Enter a user id')")
        page.fill("#call-user", "alice")
        page.select_option("#call-state", "started")
        self.submit(page, "Find calls")
        page.click(f"button[aria-label='Inspect call {self.call_id}']")
        page.wait_for_selector(f"section[aria-label='Selected call'] h3:has-text('{self.call_id}')")
        assert "user=alice" in page.url and "state=started" in page.url and f"call={self.call_id}" in page.url, page.url
        page.select_option("#call-end-operator", "bob")
        self.submit(page, "End the call")
        self.confirm(page)
        self.notice(page, f"Call {self.call_id} ended.")
        assert self.api("GET", f"/v1/calls/{self.call_id}")["state"] == "ended"
        # The general call: ended by withdrawing the caller's pending invitations.
        page.fill("#call-id", self.general_call_id)
        self.submit(page, "Open a call")
        page.click(f"button[aria-label='End call {self.general_call_id}']")
        self.confirm(page)
        self.notice(page, f"Invitations of call {self.general_call_id} cancelled.")
        assert self.api("GET", f"/v1/calls/{self.general_call_id}")["state"] == "ended"
        self.problem(page, "Find calls", {"#call-user": LONG_ID}, text="400")
        self.problem(page, "Open a call", {"#call-id": "c_nope"}, text="404")
        self.shot(page, "calls-app")

    def webhooks(self, page):
        self.nav(page, "webhooks")
        page.wait_for_selector("main p.empty:has-text('No endpoints')")
        page.fill("#hook-new-url", "http://127.0.0.1:9/parley")
        page.fill("#hook-new-types", "message.*, room.*")
        page.fill("#hook-new-description", "ops check receiver")
        self.submit(page, "New endpoint")
        self.notice(page, "created. Its signing secret")
        hooks = self.api("GET", "/v1/webhooks")["items"]
        hook = next(h for h in hooks if h["description"] == "ops check receiver")
        self.webhook_id = webhook_id = hook["webhook_id"]
        assert hook["event_types"] == ["message.*", "room.*"], hook
        self.problem(page, "New endpoint", {"#hook-new-url": "ftp://example.com/x", "#hook-new-types": "*"}, field="#hook-new-url")
        page.click(f"button[aria-label='Open endpoint {webhook_id}']")
        page.wait_for_selector(f"section[aria-label='Selected endpoint'] h3:has-text('{webhook_id}')")
        page.fill("#hook-edit-description", "ops check receiver, edited")
        page.fill("#hook-edit-timeout", "1500")
        self.submit(page, "Edit endpoint")
        self.notice(page, f"Endpoint {webhook_id} saved.")
        edited = self.api("GET", f"/v1/webhooks/{webhook_id}")
        assert edited["description"] == "ops check receiver, edited" and edited["timeout_ms"] == 1500, edited
        self.problem(page, "Edit endpoint", {"#hook-edit-timeout": "0"}, field="#hook-edit-timeout")
        page.click("button:text-is('Ping')")
        page.wait_for_selector("section[aria-label='Selected endpoint'] p:text-matches('^Ping: ')")
        # An event the endpoint selects: its delivery fails (a loopback receiver is refused) and can be retried.
        self.api("POST", "/v1/messages", {"from": "bob", "conversation_type": "peer", "to": "alice", "type": 1, "body": {"text": "for the hook"}})
        deadline = time.monotonic() + 8
        while True:
            deliveries = self.api("GET", f"/v1/webhooks/{webhook_id}/deliveries?kind=after")["items"]
            if any(d["status"] != "pending" for d in deliveries) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        after = next(d for d in deliveries if d["status"] != "pending")
        page.select_option("#delivery-kind", "after")
        self.submit(page, "Filter deliveries")
        page.click(f"button[aria-label='Attempts of delivery {after['delivery_id']}']")
        page.wait_for_selector(f"section[aria-label='Selected delivery'] h3:has-text('{after['delivery_id']}')")
        page.wait_for_selector("section[aria-label='Selected delivery'] table")
        assert f"delivery={after['delivery_id']}" in page.url and "kind=after" in page.url, page.url
        attempts_before = self.api("GET", f"/v1/webhooks/{webhook_id}/deliveries/{after['delivery_id']}")["attempts"]
        page.click(f"button[aria-label='Retry delivery {after['delivery_id']}']")
        self.notice(page, f"Delivery {after['delivery_id']} queued again")
        retried = self.api("GET", f"/v1/webhooks/{webhook_id}/deliveries/{after['delivery_id']}")
        assert retried["status"] == "pending" or len(retried["attempts"]) > len(attempts_before), retried
        self.problem(page, "Filter deliveries", {"#delivery-event-type": "t" * 70}, field="#delivery-event-type")
        page.fill("#hook-since", "0")
        self.submit(page, "Recover missed events")
        self.notice(page, "recovered.")
        self.problem(page, "Recover missed events", {"#hook-since": "last tuesday"}, text="400")
        page.click("section[aria-label='Selected endpoint'] button:text-is('Disable')")
        self.confirm(page)
        self.notice(page, "disabled.")
        assert self.api("GET", f"/v1/webhooks/{webhook_id}")["enabled"] is False
        page.click("section[aria-label='Selected endpoint'] button:text-is('Re-enable')")
        self.notice(page, "re-enabled")
        assert self.api("GET", f"/v1/webhooks/{webhook_id}")["enabled"] is True
        secret = self.api("GET", f"/v1/webhooks/{webhook_id}")["secret"]
        page.click("button:text-is('Rotate secret')")
        self.confirm(page)
        self.notice(page, "Secret rotated")
        assert self.api("GET", f"/v1/webhooks/{webhook_id}")["secret"] != secret
        self.shot(page, "webhooks-app")
        # A second endpoint to delete (the first stays for the admin pass).
        doomed = self.api("POST", "/v1/webhooks", {"url": "http://127.0.0.1:9/doomed", "event_types": ["user.*"]})["webhook_id"]
        self.nav(page, "rooms")
        self.nav(page, "webhooks")
        page.click(f"button[aria-label='Delete endpoint {doomed}']")
        self.confirm(page, doomed)
        self.notice(page, f"Endpoint {doomed} deleted.")
        assert self.api_status("GET", f"/v1/webhooks/{doomed}") == 404

    def push(self, page):
        self.nav(page, "push")
        page.wait_for_selector("form[aria-label='Push settings']")
        page.check("#push-enabled")
        page.fill("#push-gateway", "http://127.0.0.1:9")
        page.select_option("#push-format", "generic")
        page.fill("#push-timeout", "2000")
        self.submit(page, "Push settings")
        self.notice(page, "Push settings saved.")
        settings = self.api("GET", "/v1/settings")["push"]
        assert settings["enabled"] and settings["gateway_url"] == "http://127.0.0.1:9" and settings["format"] == "generic" \
            and settings["timeout_ms"] == 2000, settings
        self.problem(page, "Push settings", {"#push-timeout": "50"}, field="#push-timeout")
        page.fill("#push-timeout", "2000")
        page.fill("#device-user", "bob")
        self.submit(page, "Show devices")
        page.wait_for_selector("td code:text-is('ops-phone')")
        page.fill("#device-push-key", "ops-key-2")
        page.fill("#device-app-id", "com.example.ops")
        self.submit(page, "Register a device")
        self.notice(page, "Device registered for bob.")
        devices = self.api("GET", "/v1/users/bob/devices")["items"]
        assert any(d["push_key"] == "ops-key-2" for d in devices), devices
        extra = next(d["device_id"] for d in devices if d["push_key"] == "ops-key-2")
        page.click(f"button[aria-label='Delete device {extra}']")
        self.confirm(page, extra)
        self.notice(page, f"Device {extra} deleted.")
        assert all(d["device_id"] != extra for d in self.api("GET", "/v1/users/bob/devices")["items"])
        self.problem(page, "Register a device", {"select:#device-provider": "apns", "#device-push-key": "not-hex", "#device-app-id": "x"}, text="422")
        self.problem(page, "Show devices", {"#device-user": LONG_ID}, text="400")
        # A dry run: the decision per device and the request the gateway would get; nothing is sent.
        page.fill("#test-user", "bob")
        page.fill("#test-from", "alice")
        page.fill("#test-to", "bob")
        page.fill("#test-text", "dry run text")
        self.submit(page, "Push test")
        page.wait_for_selector("table:has(caption:text-is('Push decisions')) td code:text-is('ops-phone')")
        page.wait_for_selector("h4:text-is('Gateway request') + pre.json")
        self.problem(page, "Push test", {"#test-user": "nobody-at-all"}, text="404")
        # A real test push: the attempt is recorded (the gateway refuses the connection), then listed and inspected.
        page.fill("#test-user", "bob")
        page.set_checked("#test-dry-run", False)
        self.submit(page, "Push test")
        self.confirm(page)
        page.wait_for_selector("h4:text-is('Recorded attempt')")
        attempts = self.api("GET", "/v1/push/attempts?user_id=bob&kind=test")["items"]
        assert attempts, "the test push recorded no attempt"
        page.fill("#attempt-user", "bob")
        page.select_option("#attempt-kind", "test")
        self.submit(page, "Filter attempts")
        page.click(f"button[aria-label='Inspect attempt {attempts[0]['attempt_id']}']")
        page.wait_for_selector(f"section[aria-label='Selected attempt'] h3:has-text('{attempts[0]['attempt_id']}')")
        assert "user_id=bob" in page.url and "kind=test" in page.url and "devices=bob" in page.url, page.url
        self.problem(page, "Filter attempts", {"#attempt-user": LONG_ID}, field="#attempt-user")
        self.shot(page, "push-app")

    def eventlog(self, page):
        self.nav(page, "eventlog")
        page.wait_for_selector("main table:has(caption:text-is('Events'))")
        page.fill("#log-types", "message.sent")
        page.fill("#log-user", "alice")
        self.submit(page, "Filter events")
        page.wait_for_selector("main td:has-text('ops check hello')")
        types = page.eval_on_selector_all("main table:has(caption:text-is('Events')) tbody tr td:nth-child(2)", "cells => cells.map(c => c.textContent)")
        assert types and set(types) == {"message.sent"}, types
        expected = [e["id"] for e in self.api("GET", "/v1/events/log?after=earliest&types=message.sent&user_id=alice&limit=50")["items"]]
        shown = page.eval_on_selector_all("main table:has(caption:text-is('Events')) tbody tr td:first-child", "cells => cells.map(c => c.textContent)")
        assert shown == expected, f"the console shows {shown}, the log has {expected}"
        page.click("main a[aria-label='message.sent: documentation'] >> nth=0")
        page.wait_for_selector("section[aria-label='Event type reference'] p:has-text('A message was sent')")
        page.click(f"button[aria-label='Data of event {expected[0]}']")
        page.wait_for_selector(f"section[aria-label='Selected event'] h3:has-text('{expected[0]}')")
        assert "types=message.sent" in page.url and "doc=message.sent" in page.url and f"event={expected[0]}" in page.url, page.url
        # "Newer events" reads what was written since.
        self.api("POST", "/v1/messages", {"from": "alice", "conversation_type": "peer", "to": "carol", "type": 1, "body": {"text": "written later"}})
        page.click("button:text-is('Newer events')")
        page.wait_for_selector("main td:has-text('written later')")
        self.problem(page, "Filter events", {"#log-after": "yesterday"}, text="400")
        self.shot(page, "eventlog-app")

    def files(self, page):
        self.nav(page, "files")
        page.wait_for_selector(f"main td code:text-is('{self.file_id}')")
        page.set_input_files("#file-upload", files=[{"name": "ops-upload.txt", "mimeType": "text/plain", "buffer": b"uploaded from the console\n"}])
        page.fill("#file-owner", "carol")
        self.submit(page, "Upload a file")
        self.notice(page, "uploaded.")
        uploaded = self.api("GET", "/v1/files?user_id=carol")["items"]
        assert any(f["file_name"] == "ops-upload.txt" for f in uploaded), uploaded
        page.fill("#file-user", "bob")
        self.submit(page, "Filter files")
        page.click(f"button[aria-label='Inspect file {self.file_id}']")
        page.wait_for_selector(f"section[aria-label='Selected file'] h3:has-text('{self.file_id}')")
        assert "user_id=bob" in page.url and f"file={self.file_id}" in page.url, page.url
        self.problem(page, "Filter files", {"#file-user": LONG_ID}, field="#file-user")
        page.set_input_files("#file-upload", files=[{"name": "x.txt", "mimeType": "text/plain", "buffer": b"x"}])
        self.problem(page, "Upload a file", {"#file-owner": "nobody-at-all"}, text="404")
        doomed = next(f["file_id"] for f in uploaded if f["file_name"] == "ops-upload.txt")
        page.fill("#file-user", "carol")
        self.submit(page, "Filter files")
        page.click(f"button[aria-label='Delete file {doomed}']")
        self.confirm(page, doomed)
        self.notice(page, f"File {doomed} deleted.")
        assert self.api_status("GET", f"/v1/files/{doomed}/meta") == 404
        self.shot(page, "files-app")

    def moderation(self, page):
        self.nav(page, "moderation")
        page.wait_for_selector("main p.empty:has-text('The queue is empty')")
        page.fill("#new-report-reporter", "bob")
        page.select_option("#new-report-type", "user")
        page.fill("#new-report-target", "alice")
        page.fill("#new-report-comment", "spam from the ops check")
        self.submit(page, "File a report")
        self.notice(page, "filed.")
        report = self.api("GET", "/v1/reports?status=open")["items"][0]
        page.click(f"button[aria-label='Review report {report['report_id']}']")
        page.wait_for_selector(f"section[aria-label='Selected report'] h3:has-text('{report['report_id']}')")
        assert f"report={report['report_id']}" in page.url and "status=open" in page.url, page.url
        self.problem(page, "Decide", {"select:#report-action": "mute_user"}, text="duration", confirm=True)
        page.select_option("#report-action", "warn_user")
        page.fill("#report-text", "please stop")
        page.fill("#report-moderator", "ops-check")
        self.submit(page, "Decide")
        self.confirm(page)
        self.notice(page, f"Report {report['report_id']} resolved.")
        assert self.api("GET", f"/v1/reports/{report['report_id']}")["status"] == "resolved"
        page.wait_for_selector("table:has(caption:text-is('Moderation log')) td:text-is('warn_user')")
        self.problem(page, "File a report", {"#new-report-reporter": "bob", "#new-report-target": "nobody-at-all"}, text="404")
        self.problem(page, "Filter reports", {"#report-user": LONG_ID}, field="#report-user")
        self.problem(page, "Filter the log", {"#log-action": "a" * 70}, field="#log-action")
        page.fill("#log-action", "warn_user")
        self.submit(page, "Filter the log")
        page.wait_for_selector("table:has(caption:text-is('Moderation log')) td:text-is('warn_user')")
        # A dry-run removal: a job the Jobs screen follows.
        page.fill("#remove-user", "alice")
        self.submit(page, "Remove messages")
        page.wait_for_selector("main a:text-is('follow it on the Jobs screen')")
        self.problem(page, "Remove messages", {"#remove-user": "nobody-at-all"}, text="404")
        self.shot(page, "moderation-app")

    def blocklists(self, page):
        self.nav(page, "blocklists")
        page.wait_for_selector("main p.empty:has-text('No blocklists')")
        page.fill("#bl-name", "ops-words")
        page.fill("#bl-entries", "darn\nheck")
        self.submit(page, "New blocklist")
        self.notice(page, "Blocklist ops-words created with 2 entries.")
        assert self.api("GET", "/v1/blocklists/ops-words")["entries"] == ["darn", "heck"]
        self.problem(page, "New blocklist", {"#bl-name": "ops-regex", "select:#bl-type": "regex", "#bl-entries": "(a)\\1"}, text="7000804")
        page.click("button[aria-label='Open blocklist ops-words']")
        page.wait_for_selector("section[aria-label='Selected blocklist'] h3:has-text('ops-words')")
        assert "list=ops-words" in page.url, page.url
        page.fill("#bl-add-entry", "drat")
        self.submit(page, "Add an entry")
        self.notice(page, "Entry added to ops-words.")
        assert self.api("GET", "/v1/blocklists/ops-words")["entries"] == ["darn", "heck", "drat"]
        page.click("button[aria-label='Remove entry heck']")
        self.confirm(page)
        self.notice(page, "Entry removed from ops-words.")
        assert self.api("GET", "/v1/blocklists/ops-words")["entries"] == ["darn", "drat"]
        page.select_option("#bl-edit-action", "mask")
        self.submit(page, "Edit blocklist")
        self.notice(page, "Blocklist ops-words saved.")
        assert self.api("GET", "/v1/blocklists/ops-words")["action"] == "mask"
        self.problem(page, "Edit blocklist", {"select:#bl-edit-type": "domain", "#bl-edit-entries": "bad@domain"}, text="7000804")
        self.problem(page, "Add an entry", {"#bl-add-entry": "y" * 300}, text="7000804")
        page.fill("#bl-test-text", "Darn it")
        self.submit(page, "Test blocklists")
        page.wait_for_selector("main p:text-is('Strongest action: mask.')")
        self.problem(page, "Test blocklists", {"#bl-test-text": "x", "#bl-test-names": "no-such-list"}, text="404")
        self.shot(page, "blocklists-app")
        self.api("POST", "/v1/blocklists", {"name": "ops-doomed", "type": "word", "action": "flag", "entries": ["zzz"]})
        self.nav(page, "rooms")
        self.nav(page, "blocklists")
        page.click("button[aria-label='Delete blocklist ops-doomed']")
        self.confirm(page, "ops-doomed")
        self.notice(page, "Blocklist ops-doomed deleted.")
        assert self.api_status("GET", "/v1/blocklists/ops-doomed") == 404

    def retention(self, page):
        self.nav(page, "retention")
        page.wait_for_selector("main p.empty:has-text('No policies')")
        page.select_option("#policy-scope", "group")
        page.fill("#policy-days", "30")
        self.submit(page, "Set a policy")
        self.notice(page, "saved for every group conversation.")
        policies = self.api("GET", "/v1/retention/policies")["items"]
        assert [(p["scope"]["type"], p["max_age_days"]) for p in policies] == [("group", 30)], policies
        self.problem(page, "Set a policy", {"#policy-days": "0"}, field="#policy-days")
        page.select_option("#hold-scope", "user")
        page.fill("#hold-scope-id", "alice")
        page.fill("#hold-reason", "case 42")
        self.submit(page, "Place a hold")
        self.notice(page, "placed on user alice.")
        holds = self.api("GET", "/v1/retention/holds")["items"]
        assert holds and holds[0]["scope"] == {"type": "user", "user_id": "alice"}, holds
        self.problem(page, "Place a hold", {"select:#hold-scope": "user", "#hold-scope-id": ""}, field="#hold-scope-id")
        page.click("button:text-is('Dry run now')")
        page.wait_for_selector("main p:text-matches('^A run now would purge')")
        page.click("button:text-is('Purge now')")
        self.confirm(page)
        page.wait_for_selector("main p:text-matches('^Run .* started.')")
        runs = self.api("GET", "/v1/retention/runs")["items"]
        assert [r["dry_run"] for r in runs[:2]] == [False, True], runs
        hold_id = holds[0]["hold_id"]
        page.click(f"button[aria-label='Release hold {hold_id}']")
        self.confirm(page, hold_id)
        self.notice(page, f"Hold {hold_id} released.")
        assert self.api("GET", "/v1/retention/holds")["items"] == []
        self.shot(page, "retention-app")

    def jobs(self, page):
        self.nav(page, "jobs")
        job = self.api("GET", "/v1/jobs")["items"][0]
        page.click(f"button[aria-label='Inspect job {job['job_id']}']")
        page.wait_for_selector(f"section[aria-label='Selected job'] h3:has-text('{job['job_id']}')")
        self.problem(page, "Filter jobs", {"#job-kind": "k" * 70}, field="#job-kind")
        page.fill("#job-kind", "remove_messages")
        self.submit(page, "Filter jobs")
        page.wait_for_selector(f"main td code:text-is('{job['job_id']}')")
        assert "kind=remove_messages" in page.url and f"job={job['job_id']}" not in page.url, page.url
        self.shot(page, "jobs-app")

    def cancel_job(self, page):
        """A removal big enough to be cancelled while queued or running: cancelling a finished job is a 409."""
        for i in range(30):
            self.api("POST", "/v1/messages", {"from": "dave", "conversation_type": "peer", "to": "carol", "type": 1, "body": {"text": f"m{i}"}})
        job = self.api("POST", "/v1/moderation/remove_messages", {"user_id": "dave", "from": 0, "to": 4102444800000, "mode": "hide", "dry_run": False})
        self.open(page, "jobs", f"?job={job['job_id']}")
        page.wait_for_selector(f"section[aria-label='Selected job'] h3:has-text('{job['job_id']}')")
        cancel = page.locator(f"section[aria-label='Selected job'] button[aria-label='Cancel job {job['job_id']}']")
        if cancel.count():
            self.expected_failures += 1  # it may have finished between the read and the click: a 409 shown as a problem
            cancel.click()
            self.confirm(page)
            page.wait_for_selector("#notice:not([hidden]), #problem:not([hidden])")
            if page.is_visible("#notice"):
                self.expected_failures -= 1
        state = self.api("GET", f"/v1/jobs/{job['job_id']}")["state"]
        assert state in ("cancelled", "running", "succeeded"), state
        self.cancelled_state = state

    # MARK: - Charts

    def mock_series(self, page):
        def fulfil(route):
            query = route.request.url.split("?", 1)[1] if "?" in route.request.url else ""
            range_ = "7d" if "range=7d" in query else "1h"
            self.mocked[range_] = known_series(range_)
            route.fulfill(status=200, content_type="application/json", body=json.dumps(self.mocked[range_]))

        page.route("**/v1/stats/series**", fulfil)

    def check_charts(self, page, series, exact=True, skip_last=0):
        figures = page.locator("figure.chart")
        assert figures.count() == 6, f"{figures.count()} charts"
        checked = 0
        for metric, values in series["series"].items():
            svg = page.locator(f"svg.chart-svg:has(polyline[data-metric='{metric}'])")
            polylines = page.eval_on_selector_all(f"polyline[data-metric='{metric}']", "ls => ls.map(l => l.getAttribute('points'))")
            if all(v is None for v in values):
                assert not polylines, f"{metric}: all null but drawn"
                continue
            scale = svg.evaluate("s => [s.dataset.x0, s.dataset.dx, s.dataset.baseline, s.dataset.perUnit, s.dataset.buckets].map(Number)")
            x0, dx, baseline, per_unit, buckets = scale
            assert buckets == len(values), f"{metric}: {buckets} buckets drawn, {len(values)} sent"
            seen = {}
            for points in polylines:
                run = []
                for pair in points.split():
                    x, y = (float(n) for n in pair.split(","))
                    bucket = round((x - x0) / dx)
                    assert abs(x - (x0 + bucket * dx)) <= 0.006, f"{metric}: x {x} is not on a bucket"
                    value = (baseline - y) / per_unit
                    run.append(bucket)
                    seen[bucket] = value
                assert run == list(range(run[0], run[0] + len(run))), f"{metric}: a polyline skips buckets {run}"
            runs = sum(1 for i, v in enumerate(values) if v is not None and (i == 0 or values[i - 1] is None))
            assert len(polylines) == runs, f"{metric}: {len(polylines)} polylines for {runs} runs (nulls must be gaps)"
            for bucket, value in enumerate(values[: len(values) - skip_last]):
                if value is None:
                    assert bucket not in seen, f"{metric}: null bucket {bucket} drawn"
                    continue
                assert bucket in seen, f"{metric}: bucket {bucket} missing"
                tolerance = 0.006 / per_unit + 1e-9
                if exact:
                    assert abs(seen[bucket] - value) <= tolerance, f"{metric}[{bucket}]: drawn {seen[bucket]}, sent {value}"
            checked += 1
        for figure in range(6):
            label = figures.nth(figure).locator("svg").get_attribute("aria-label")
            assert label and ("latest" in label or "no data" in label), label
            assert figures.nth(figure).locator("figcaption").inner_text().strip()
            assert figures.nth(figure).locator("ul.legend li").count() >= 1
            assert figures.nth(figure).locator("text.y-tick").count() >= 3 and figures.nth(figure).locator("text.x-tick").count() >= 3
        return checked

    def activity(self, page):
        self.mock_series(page)
        self.nav(page, "activity")
        page.wait_for_selector("figure.chart svg polyline")
        checked = self.check_charts(page, self.mocked["1h"])
        page.click("button[data-range='7d']")
        page.wait_for_selector("figure.chart figcaption:has-text('last 7 days')")
        assert "range=7d" in page.url, page.url
        checked += self.check_charts(page, self.mocked["7d"])
        print(f"  charts: {checked} series mapped back point by point (1h and 7d), nulls as gaps")
        self.shot(page, "activity-mocked")
        page.unroute("**/v1/stats/series**")
        self.activity_unmocked(page)

    def activity_unmocked(self, page):
        """Against the server itself: the binary may not serve the route yet (404, said on the screen), or it does and
        the chart must show what the API answers."""
        status = self.api_status("GET", "/v1/stats/series?range=1h")
        if status == 404:
            self.expected_failures += 1
            self.open(page, "activity", "?range=1h")
            page.wait_for_selector("main p:has-text('does not serve GET /v1/stats/series')")
            print("  unmocked: this server answers 404 for /v1/stats/series; the screen says so")
            return
        for attempt in range(2):
            self.open(page, "activity", "?range=1h")
            page.wait_for_selector("figure.chart")
            answer = self.api("GET", "/v1/stats/series?range=1h")
            drawn_from = page.locator("svg.chart-svg").count()
            try:
                # The newest bucket still counts while we compare: it is left out.
                self.check_charts(page, answer, skip_last=1)
                print(f"  unmocked: {drawn_from} charts match GET /v1/stats/series")
                break
            except AssertionError:
                if attempt == 1:
                    raise
        self.shot(page, "activity-live")

    # MARK: - The passes

    def sign_in(self, page, key):
        page.goto(self.base + "/console")
        if page.is_visible("#sign-out"):
            page.click("#sign-out")
        page.wait_for_selector("#credential")
        page.fill("#credential", key)
        page.keyboard.press("Enter")

    def app_pass(self, page):
        self.sign_in(page, self.app_key)
        page.wait_for_selector("#screen-title:text-is('Users')")
        for name in ("rooms", "calls", "webhooks", "push", "eventlog", "files", "moderation", "blocklists", "retention", "jobs"):
            started = time.monotonic()
            getattr(self, name)(page)
            self.accessibility(page, name)
            print(f"  {name}: done ({time.monotonic() - started:.1f} s)")
        self.cancel_job(page)
        self.activity(page)
        self.accessibility(page, "activity")

    def admin_pass(self, page):
        print("sign in with the admin key, act for app default")
        self.sign_in(page, self.admin_key)
        page.wait_for_selector("#screen-title:text-is('Apps and keys')")
        # Before an app is chosen, an app screen says what to do instead of calling the API.
        self.open(page, "rooms")
        page.wait_for_selector("main p.empty a[href='#apps']")
        page.click('#nav a[href="#apps"]')
        page.wait_for_selector("#screen-title:text-is('Apps and keys')")
        page.click("main tr:has(code:text-is('default')) button:text('Act for this app')")
        page.wait_for_selector("#identity-text:has-text('acting for app default')")
        # Each screen from a URL holding its filters and selection: the reload draws it from the URL alone.
        urls = {
            "rooms": ("?q=ops&room=ops-lobby", "section[aria-label='Selected room'] h3:has-text('ops-lobby')"),
            "calls": (f"?user=alice&state=ended&call={self.call_id}", f"section[aria-label='Selected call'] h3:has-text('{self.call_id}')"),
            "webhooks": (f"?webhook={self.webhook_id}&kind=after", f"section[aria-label='Selected endpoint'] h3:has-text('{self.webhook_id}')"),
            "push": ("?user_id=bob&kind=test&devices=bob", "td code:text-is('ops-phone')"),
            "eventlog": ("?types=message.*&user_id=alice&doc=message.sent", "section[aria-label='Event type reference'] h3"),
            "files": (f"?user_id=bob&file={self.file_id}", f"section[aria-label='Selected file'] h3:has-text('{self.file_id}')"),
            "moderation": ("?status=resolved", "table:has(caption:text-is('Reports')) td:text-is('resolved')"),
            "blocklists": ("?list=ops-words", "section[aria-label='Selected blocklist'] h3:has-text('ops-words')"),
            "retention": ("", "table:has(caption:text-is('Retention policies'))"),
            "jobs": ("?kind=remove_messages", "table:has(caption:text-is('Jobs'))"),
            "activity": ("?range=7d", "main [role=status]:has-text('')"),
        }
        if self.api_status("GET", "/v1/stats/series?range=7d") == 404:
            self.mock_series(page)
        for screen, (query, selector) in urls.items():
            self.open(page, screen, query)
            page.wait_for_selector(selector)
            if screen == "push":
                assert page.input_value("#attempt-user") == "bob" and page.input_value("#attempt-kind") == "test"
            if screen == "eventlog":
                assert page.input_value("#log-types") == "message.*"
            self.accessibility(page, f"{screen} (admin)")
            self.shot(page, f"{screen}-admin")
        # Actions with the admin key: a destroy and a delete, each checked through the API.
        self.open(page, "rooms", "?room=ops-doomed")
        page.click("section[aria-label='Selected room'] button[aria-label='Destroy room ops-doomed']")
        self.confirm(page, "ops-doomed")
        self.notice(page, "Room ops-doomed destroyed.")
        assert self.api_status("GET", "/v1/rooms/ops-doomed") == 404
        assert "room=" not in page.url, page.url
        self.open(page, "files", f"?file={self.file_id}")
        page.click(f"section[aria-label='Selected file'] button[aria-label='Delete file {self.file_id}']")
        self.confirm(page, self.file_id)
        self.notice(page, f"File {self.file_id} deleted.")
        assert self.api_status("GET", f"/v1/files/{self.file_id}/meta") == 404
        self.open(page, "webhooks", f"?webhook={self.webhook_id}")
        page.click(f"section[aria-label='Selected endpoint'] button[aria-label='Delete endpoint {self.webhook_id}']")
        self.confirm(page, self.webhook_id)
        self.notice(page, f"Endpoint {self.webhook_id} deleted.")
        assert self.api_status("GET", f"/v1/webhooks/{self.webhook_id}") == 404

    def narrow_pass(self, page):
        print("390 px wide: no screen scrolls sideways")
        page.set_viewport_size({"width": 390, "height": 844})
        for screen, query in [("rooms", "?room=ops-lobby"), ("calls", f"?user=alice&call={self.call_id}"), ("webhooks", ""),
                              ("push", "?devices=bob"), ("eventlog", "?doc=message.sent"), ("files", ""), ("moderation", ""),
                              ("blocklists", "?list=ops-words"), ("retention", ""), ("jobs", ""), ("activity", "?range=1h")]:
            self.open(page, screen, query)
            page.wait_for_timeout(300)  # the screen draws from its API answers; the live stream never idles
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"{screen}: the page is {width} px wide at 390 px"
            self.shot(page, f"{screen}-390")

    def run(self, page):
        print("set up through the API")
        self.setup()
        self.problems = 0
        print("app key: every screen and action")
        self.app_pass(page)
        print(f"  {self.problems} problems provoked and shown")
        self.admin_pass(page)
        self.narrow_pass(page)
        if self.errors:
            raise AssertionError("\n".join(self.errors))


def main():
    started = time.monotonic()
    base, app_key, admin_key, shots = sys.argv[1:5]
    os.makedirs(shots, exist_ok=True)
    drive(OpsCheck(base, app_key, admin_key, shots), "ops-failure.png")
    print(f"console operations check passed in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
