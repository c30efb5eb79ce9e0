#!/usr/bin/env python3
"""Drives the admin console (GET /console) in Debian's Chromium, headless, through playwright.

usage: console_check.py <base url> <app key> <admin key> <screenshot dir>

Signs in with the app key, creates users, sends a message from the conversation screen and waits for it in the live
panel (≤ 1 s), reloads and checks the panel resumed with no duplicate and no gap (against GET /v1/events/log), visits
every screen with a screenshot of each, shows a problem readably, then signs in with the admin key for the apps
screen. Fails on any JavaScript error, and on any console error other than the one failed request it provokes.
Started by scripts/console-check.sh, which owns the server.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from playwright.sync_api import sync_playwright

# Every wait is bounded: a step that hangs fails the check instead of the CI job's clock.
STEP_TIMEOUT_MS = 10_000
LIVE_DEADLINE_S = 1.0


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


class Check:
    def __init__(self, base, app_key, admin_key, shots):
        self.base, self.app_key, self.admin_key, self.shots = base, app_key, admin_key, shots
        self.errors = []
        # Console errors the check provokes on purpose (a 409 it wants to see rendered); anything else fails.
        self.expected_failed_requests = 0

    def api(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", "Bearer " + self.app_key)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def upload(self, name, data):
        request = urllib.request.Request(self.base + "/v1/files?user_id=bob", data=data, method="POST")
        request.add_header("Authorization", "Bearer " + self.app_key)
        request.add_header("Parley-File-Name", name)
        request.add_header("Content-Type", "application/octet-stream")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

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
        print(f"  screenshot {path}")

    def screen(self, page, hash_, title):
        page.click(f'#nav a[href="{hash_}"]')
        page.wait_for_selector(f"#screen-title:text-is('{title}')")

    def panel_ids(self, page):
        return page.eval_on_selector_all("#event-list li[data-event-id]", "items => items.map(i => i.dataset.eventId)")

    def run(self, page):
        print("sign in with the app key")
        page.goto(self.base + "/console")
        page.wait_for_selector("#credential")
        assert not page.is_visible("#nav") and not page.is_visible("#sign-out"), "signed-in chrome shown before sign-in"
        self.shot(page, "1-sign-in")
        # Keyboard only: the screen's heading has focus, Tab reaches the key field, Enter submits.
        assert page.evaluate("document.activeElement.id") == "screen-title"
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == "credential"
        page.keyboard.type(self.app_key)
        page.keyboard.press("Enter")
        page.wait_for_selector("#screen-title:text-is('Users')")
        wait_connected(page)

        print("create users")
        for user_id, name in [("alice", "Alice"), ("bob", "Bob")]:
            page.fill("#new-user-id", user_id)
            page.fill("#new-user-name", name)
            page.click("form[aria-label='New user'] button[type=submit]")
            page.wait_for_selector(f"#notice:has-text('User {user_id} created.')")
        page.wait_for_selector("main td code:text-is('bob')")
        page.click("main tr:has(code:text-is('alice')) button:text('Manage')")
        page.wait_for_selector("form[aria-label='Issue a token']")
        page.click("form[aria-label='Issue a token'] button[type=submit]")
        page.wait_for_selector(".secret:has-text('Token for alice')")
        page.fill("#mute-duration", "600")
        page.click("form[aria-label='Mute user'] button[type=submit]")
        page.wait_for_selector("#notice:has-text('Mute of alice updated.')")
        page.wait_for_selector("main tr:has(code:text-is('alice')) td:nth-child(3):not(:text-is('no'))")
        # Unmuted again: alice sends from the conversation screen below.
        page.fill("#mute-duration", "0")
        page.click("form[aria-label='Mute user'] button[type=submit]")
        page.wait_for_selector("main tr:has(code:text-is('alice')) td:nth-child(3):text-is('no')")
        page.click("button:text('Kick (close streams, revoke tokens)')")
        page.wait_for_selector("#notice:has-text('alice kicked')")
        self.shot(page, "2-users")

        print("a problem is shown readably (duplicate user → 409 7000101)")
        self.expected_failed_requests += 1
        page.fill("#new-user-id", "alice")
        page.click("form[aria-label='New user'] button[type=submit]")
        page.wait_for_selector("#problem:not([hidden])")
        problem = page.inner_text("#problem")
        assert "409" in problem and "7000101" in problem and "user alice already exists" in problem, problem
        assert "null" not in problem and "undefined" not in problem, problem
        self.shot(page, "3-problem")

        print("groups")
        self.screen(page, "#groups", "Groups")
        page.fill("#group-id", "team")
        page.fill("#group-name", "Team")
        page.fill("#group-owner", "alice")
        page.fill("#group-members", "bob")
        page.click("form[aria-label='New group'] button[type=submit]")
        page.wait_for_selector("#notice:has-text('Group team created.')")
        page.click("main tr:has(code:text-is('team')) button:text('Members')")
        page.wait_for_selector("section[aria-label='Selected group'] td code:text-is('bob')")
        self.shot(page, "4-groups")

        print("open a conversation and send from the console")
        self.screen(page, "#conversation", "Conversation")
        page.fill("#conv-user", "alice")
        page.select_option("#conv-type", "peer")
        page.fill("#conv-id", "bob")
        page.click("form[aria-label='Open a conversation'] button[type=submit]")
        page.wait_for_selector("#send-text")
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
            self.api("POST", "/v1/messages", {"from": "bob", "conversation_type": "peer", "to": "alice", "type": 1,
                                              "body": {"text": f"filler {i}"}})
        page.click("form[aria-label='Open a conversation'] button[type=submit]")
        page.wait_for_selector("button:text('Older messages'):visible")
        page.click("button:text('Older messages')")
        page.wait_for_selector(f".messages li:has-text('{text}')")
        count = page.eval_on_selector_all(".messages li", "items => items.length")
        assert count == 26, f"{count} messages after paging back, expected 26"
        self.shot(page, "5-conversation")

        print("reload: the panel resumes with no duplicate and no gap")
        page.wait_for_selector("#event-list li:has-text('filler 24')")
        before = self.panel_ids(page)
        sent_while_away = {}

        def write_while_away(route):
            # The reloaded page has not reconnected yet: this event is one it must catch up on, not see live.
            sent_while_away.update(self.api("POST", "/v1/messages", {
                "from": "bob", "conversation_type": "peer", "to": "alice", "type": 1,
                "body": {"text": "sent while the page was away"}}))
            route.continue_()

        page.route("**/v1/events", write_while_away, times=1)
        page.reload()
        page.wait_for_selector(f"#live-status:text-is('Connected: resumed after event {before[-1]}.')")
        after_reload = self.api("POST", "/v1/messages", {"from": "alice", "conversation_type": "peer", "to": "bob",
                                                         "type": 1, "body": {"text": "sent after the reload"}})
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

        print("an image and a file message render as a thumbnail and a link")
        image = self.upload("photo.jpg", jpeg(96, 64))
        document = self.upload("notes.txt", b"remember the milk\n")
        self.api("POST", "/v1/messages", {"from": "bob", "conversation_type": "peer", "to": "alice", "type": 11,
                                          "body": {"file_id": image["file_id"]}})
        self.api("POST", "/v1/messages", {"from": "bob", "conversation_type": "peer", "to": "alice", "type": 12,
                                          "body": {"file_id": document["file_id"]}})
        self.screen(page, "#conversation", "Conversation")
        page.fill("#conv-user", "alice")
        page.select_option("#conv-type", "peer")
        page.fill("#conv-id", "bob")
        page.click("form[aria-label='Open a conversation'] button[type=submit]")
        page.wait_for_selector(".messages li a.media:has-text('notes.txt')")
        thumbnail = page.locator(".messages li a.media img[alt='photo.jpg']")
        thumbnail.wait_for()
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=thumbnail.element_handle())
        width = thumbnail.evaluate("img => img.naturalWidth")
        assert width == 96, f"the thumbnail decoded {width} px wide, expected 96 (never enlarged)"
        self.shot(page, "5b-media")

        print("stats and health")
        self.screen(page, "#stats", "Stats and health")
        page.wait_for_selector("dl.stats dt:text('users total')")
        self.shot(page, "6-stats")
        self.screen(page, "#users", "Users")
        page.wait_for_selector("main td code:text-is('alice')")

        print("sign in with the admin key: apps and keys")
        page.click("#sign-out")
        page.wait_for_selector("#credential")
        page.fill("#credential", self.admin_key)
        page.keyboard.press("Enter")
        page.wait_for_selector("#screen-title:text-is('Apps and keys')")
        page.click("main tr:has(code:text-is('default')) button:text('Act for this app')")
        page.wait_for_selector("#identity-text:has-text('acting for app default')")
        wait_connected(page)
        page.click("main tr:has(code:text-is('default')) button:text('Keys')")
        page.wait_for_selector("section[aria-label='Keys of the selected app'] table")
        self.shot(page, "7-apps")

        if self.errors:
            raise AssertionError("\n".join(self.errors))


def main():
    base, app_key, admin_key, shots = sys.argv[1:5]
    os.makedirs(shots, exist_ok=True)
    executable = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if not executable:
        sys.exit("no chromium executable (apt-get install chromium, or set CHROMIUM)")
    check = Check(base, app_key, admin_key, shots)
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
                page.screenshot(path=os.path.join(shots, "failure.png"), full_page=True)
                print("\n".join(check.errors) or "no console errors", file=sys.stderr)
                raise
        finally:
            browser.close()
    print("console check passed")


if __name__ == "__main__":
    main()
