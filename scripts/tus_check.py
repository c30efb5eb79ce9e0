#!/usr/bin/env python3
"""Resumable uploads with tuspy, the tus project's Python client (run by scripts/tus-check.sh against a fresh server).

usage: tus_check.py BASE_URL ADMIN_KEY

Creates an app and a user; checks discovery (OPTIONS, no credential); uploads a 6 MiB file in 1 MiB chunks with
tuspy, cut off twice: once between chunks (the uploader is dropped and a new one resumes from the URL), once in the
middle of a PATCH (a raw request sends half its body, then the connection closes); each time the new uploader's offset
(asked with HEAD) must be where the bytes stopped, not 0. Then the download must have the file's SHA-256, and the
final PATCH must have answered Parley-File-Id. Exit status 1 on any failure.
"""
import hashlib
import http.client
import json
import os
import secrets
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from tusclient import client as tus_client

MIB = 1 << 20


def fail(message):
    print("tus check: " + message)
    sys.exit(1)


def call(base, method, path, key, body=None, headers=None):
    request = urllib.request.Request(base + path, method=method, data=body, headers=dict(headers or {}))
    request.add_header("Authorization", "Bearer " + key)
    if body is not None and "Content-Type" not in request.headers:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, dict(response.headers), response.read()


def cut_patch(url, key, offset, chunk):
    """A PATCH that sends half of `chunk` and closes: the server must keep what arrived."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.putrequest("PATCH", parts.path)
    for name, value in [
        ("Authorization", "Bearer " + key), ("Tus-Resumable", "1.0.0"), ("Upload-Offset", str(offset)),
        ("Content-Type", "application/offset+octet-stream"), ("Content-Length", str(len(chunk))),
    ]:
        connection.putheader(name, value)
    connection.endheaders()
    connection.send(chunk[: len(chunk) // 2])
    time.sleep(0.3)
    connection.close()
    return offset + len(chunk) // 2


def main():
    if len(sys.argv) != 3:
        fail("usage: tus_check.py BASE_URL ADMIN_KEY")
    base, admin_key = sys.argv[1], sys.argv[2]
    started = time.monotonic()
    app_id = "tus" + secrets.token_hex(4)
    app = {"app_id": app_id, "name": "tus check", "settings": {"file_max_bytes": 64 * MIB}}
    _, _, body = call(base, "POST", "/v1/apps", admin_key, json.dumps(app).encode())
    key = json.loads(body)["key"]["secret"]
    call(base, "POST", "/v1/users", key, json.dumps({"user_id": "alice"}).encode())

    discovery = urllib.request.urlopen(urllib.request.Request(base + "/v1/uploads", method="OPTIONS"), timeout=10)
    if discovery.headers.get("Tus-Version") != "1.0.0" or "creation" not in discovery.headers.get("Tus-Extension", ""):
        fail("OPTIONS /v1/uploads does not describe tus 1.0.0: %s" % dict(discovery.headers))

    content = os.urandom(6 * MIB + 12345)
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(content)
        f.flush()
        tus = tus_client.TusClient(base + "/v1/uploads", headers={"Authorization": "Bearer " + key})
        metadata = {"filename": "tus-check.bin", "user_id": "alice"}

        # Two chunks, then the uploader is dropped, as a client that lost its connection between requests.
        first = tus.uploader(f.name, chunk_size=MIB, metadata=metadata)
        first.upload_chunk()
        first.upload_chunk()
        if first.offset != 2 * MIB:
            fail("after two chunks the offset is %d, not %d" % (first.offset, 2 * MIB))
        url = first.url
        del first

        second = tus.uploader(f.name, url=url, chunk_size=MIB)
        if second.offset != 2 * MIB:
            fail("a new uploader resumed at %d, not %d" % (second.offset, 2 * MIB))
        second.upload_chunk()

        # Cut off in the middle of a PATCH: the half that arrived is kept.
        kept = cut_patch(url, key, second.offset, content[second.offset: second.offset + MIB])
        deadline = time.monotonic() + 10
        third = tus.uploader(f.name, url=url, chunk_size=MIB)
        while third.offset != kept and time.monotonic() < deadline:
            time.sleep(0.1)
            third = tus.uploader(f.name, url=url, chunk_size=MIB)
        if third.offset != kept:
            fail("after a PATCH cut off at %d the offset is %d" % (kept, third.offset))
        third.upload()
        file_id = third.request.response_headers.get("parley-file-id")
        if not file_id or not file_id.startswith("f_"):
            fail("the final PATCH answered no Parley-File-Id: %s" % third.request.response_headers)

    status, headers, downloaded = call(base, "GET", "/v1/files/" + file_id, key)
    if status != 200 or hashlib.sha256(downloaded).hexdigest() != hashlib.sha256(content).hexdigest():
        fail("the download of %s differs (%d bytes, status %d)" % (file_id, len(downloaded), status))
    _, _, meta = call(base, "GET", "/v1/files/%s/meta" % file_id, key)
    meta = json.loads(meta)
    if meta.get("owner_id") != "alice" or meta.get("file_name") != "tus-check.bin":
        fail("the file's meta is wrong: %s" % meta)
    print("tus check: %d bytes uploaded with tuspy in 1 MiB chunks, resumed at %d and at %d (mid-PATCH), "
          "downloaded with the same SHA-256 as %s, in %.1f s" % (len(content), 2 * MIB, kept, file_id,
                                                                  time.monotonic() - started))


if __name__ == "__main__":
    main()
