#!/usr/bin/env python3
"""The `s3` file storage backend end to end (docs/files.md#storage), run by scripts/s3-check.sh against a Parley
server whose bytes go to moto (an S3 server in Python) on loopback: small and multipart uploads download byte for byte,
ranges, the objects in the bucket and none of their bytes in PostgreSQL, dedupe, deletes, image variants, and moto
stopped mid-upload (503 6000212, nothing half-stored). Between its phases scripts/s3-check.sh restarts the server on the
same data directory with the other backend: files follow the storage their blobs recorded.

usage: s3-check.py setup MOTO_URL BUCKET   (an IAM user allowed s3:*, its key and the bucket; prints the key)
       s3-check.py PHASE PARLEY_URL PARLEY_KEY MOTO_URL BUCKET DATA_DIR MOTO_PID STATE_FILE   (S3_ACCESS_KEY_ID and
       S3_SECRET_ACCESS_KEY in the environment)
  PHASE s3:       the backend is s3 (uploads, ranges, dedupe, deletes, images); writes STATE_FILE
  PHASE postgres: the backend switched to postgres, the S3 settings kept: the files in S3 still download, and a new
                  upload goes to PostgreSQL
  PHASE back:     s3 again: the file stored in PostgreSQL downloads; then moto is stopped mid-upload
"""
import http.client
import json
import os
import random
import signal
import struct
import subprocess
import sys
import time
import urllib.parse
import zlib

import boto3

if sys.argv[1] == "setup":
    # moto lets the first requests through unsigned (INITIAL_NO_AUTH_ACTION_COUNT): these three. From then on it
    # checks every signature, Parley's included.
    moto_url, bucket = sys.argv[2:4]
    iam = boto3.client("iam", endpoint_url=moto_url, region_name="us-east-1", aws_access_key_id="setup", aws_secret_access_key="setup")
    iam.create_user(UserName="parley")
    iam.put_user_policy(UserName="parley", PolicyName="files", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    created = iam.create_access_key(UserName="parley")["AccessKey"]
    boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1", aws_access_key_id=created["AccessKeyId"],
                 aws_secret_access_key=created["SecretAccessKey"]).create_bucket(Bucket=bucket)
    print(created["AccessKeyId"], created["SecretAccessKey"])
    sys.exit(0)

PHASE, PARLEY, KEY, MOTO, BUCKET, DATA, MOTO_PID, STATE_FILE = sys.argv[1:9]
MOTO_PID = int(MOTO_PID)
parsed = urllib.parse.urlparse(PARLEY)
s3 = boto3.client("s3", endpoint_url=MOTO, region_name="us-east-1", aws_access_key_id=os.environ["S3_ACCESS_KEY_ID"],
                  aws_secret_access_key=os.environ["S3_SECRET_ACCESS_KEY"])
checks = 0


def check(condition, what):
    global checks
    if not condition:
        print(f"FAILED: {what}")
        sys.exit(1)
    checks += 1
    print(f"ok: {what}")


def request(method, path, body=None, headers=None):
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
    all_headers = {"Authorization": f"Bearer {KEY}"}
    all_headers.update(headers or {})
    connection.request(method, path, body=body, headers=all_headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, dict(response.getheaders()), data


def upload(data, name, content_type="application/octet-stream"):
    status, _, body = request("POST", "/v1/files", data, {"Parley-File-Name": urllib.parse.quote(name), "Content-Type": content_type})
    return status, json.loads(body) if body else None


def objects():
    listed = s3.list_objects_v2(Bucket=BUCKET)
    return {item["Key"]: item["Size"] for item in listed.get("Contents", [])}


def sql(query):
    out = subprocess.run(["psql", "-h", os.path.join(DATA, "run"), "-p", "5432", "-U", "parley", "-d", "postgres", "-Atc", query],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def png(width, height):
    """An RGB PNG of a gradient with noise (so it is no blank image that every encoder shrinks alike)."""
    rows = b"".join(b"\x00" + bytes((x * 255 // width + random.randint(0, 9)) % 256 for x in range(width)) * 1
                    + bytes((y * 255 // height) % 256 for _ in range(width)) * 2 for y in range(height))
    # The rows above are R for every pixel, then G and B: regroup as RGB triples per row.
    raw = bytearray()
    stride = 1 + 3 * width
    for y in range(height):
        row = rows[y * stride:(y + 1) * stride]
        r, g, b = row[1:1 + width], row[1 + width:1 + 2 * width], row[1 + 2 * width:]
        raw += b"\x00" + bytes(v for triple in zip(r, g, b) for v in triple)

    def chunk(kind, payload):
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(raw), 6)) + chunk(b"IEND", b""))


random.seed(20261206)
app_id = sql("SELECT app_id FROM apps ORDER BY created_at LIMIT 1")


def download(file_id, expected, what):
    started = time.monotonic()
    status, _, body = request("GET", f"/v1/files/{file_id}")
    check(status == 200 and body == expected, f"{what} downloads byte for byte ({len(expected)} bytes, {time.monotonic() - started:.2f} s)")


if PHASE == "postgres":
    state = json.load(open(STATE_FILE))
    download(state["big"], open(state["big_path"], "rb").read(), "with the backend switched to postgres, the file in S3")
    kept = os.urandom(300_000)
    status, kept_file = upload(kept, "kept-in-postgres.bin")
    check(status == 201, "a new upload answers 201")
    check(sql(f"SELECT storage FROM file_blobs WHERE app_id = '{app_id}' AND blob_id = "
              f"(SELECT blob_id FROM files WHERE app_id = '{app_id}' AND file_id = '{kept_file['file_id']}')") == "postgres"
          and sql("SELECT count(*) FROM file_chunks") == "2", "and is stored in PostgreSQL (two chunks)")
    check(len(objects()) == state["objects"], "the bucket did not change")
    open(state["kept_path"], "wb").write(kept)
    state["kept"] = kept_file["file_id"]
    json.dump(state, open(STATE_FILE, "w"))
    print(f"{checks} passed, 0 failed")
    sys.exit(0)

if PHASE == "back":
    state = json.load(open(STATE_FILE))
    download(state["kept"], open(state["kept_path"], "rb").read(), "back on s3, the file stored in PostgreSQL")
    download(state["big"], open(state["big_path"], "rb").read(), "and the file in S3")
    if os.environ.get("S3_CHECK_TIMING"):
        # One timing of 100 MiB up and down (not in CI: it is no benchmark).
        hundred = os.urandom(100 * 1024 * 1024)
        started = time.monotonic()
        status, timed = upload(hundred, "hundred.bin")
        check(status == 201, f"100 MiB uploaded in {time.monotonic() - started:.2f} s")
        download(timed["file_id"], hundred, "100 MiB")
        del hundred
    files_before = sql(f"SELECT count(*) FROM files WHERE app_id = '{app_id}'")
    blobs_before = sql(f"SELECT count(*) FROM file_blobs WHERE app_id = '{app_id}'")
    big_file = {"file_id": state["big"]}

if PHASE == "s3":
    check(objects() == {}, "the bucket starts empty")
    forged = boto3.client("s3", endpoint_url=MOTO, region_name="us-east-1", aws_access_key_id=os.environ["S3_ACCESS_KEY_ID"],
                          aws_secret_access_key="not-the-secret")
    try:
        forged.list_objects_v2(Bucket=BUCKET)
        refused = ""
    except Exception as error:  # botocore's ClientError
        refused = str(error)
    check("SignatureDoesNotMatch" in refused, "moto checks signatures (a wrong secret is refused), so it verified each of Parley's")

    # A small file: one PUT.
    small = os.urandom(100_000)
    status, small_file = upload(small, "small.bin")
    check(status == 201, f"a small upload answers 201 ({status})")
    status, _, body = request("GET", f"/v1/files/{small_file['file_id']}")
    check(status == 200 and body == small, "the small file downloads byte for byte")

    # A big one: 20 MiB, three parts of a multipart upload.
    big = os.urandom(20 * 1024 * 1024)
    started = time.monotonic()
    status, big_file = upload(big, "big.bin")
    check(status == 201 and big_file["file_size"] == len(big), f"a 20 MiB upload answers 201 ({status}, {time.monotonic() - started:.2f} s)")
    started = time.monotonic()
    status, _, body = request("GET", f"/v1/files/{big_file['file_id']}")
    check(status == 200 and body == big, f"the 20 MiB file downloads byte for byte ({time.monotonic() - started:.2f} s)")
    start, end = 8 * 1024 * 1024 - 100, 13 * 1024 * 1024 + 7  # across a part boundary and two ranged GETs
    status, headers, body = request("GET", f"/v1/files/{big_file['file_id']}", headers={"Range": f"bytes={start}-{end}"})
    check(status == 206 and body == big[start:end + 1] and headers.get("Content-Range") == f"bytes {start}-{end}/{len(big)}",
          "a Range read answers 206 with exactly those bytes")

    stored = objects()
    blobs = sql(f"SELECT blob_id || ':' || storage || ':' || size FROM file_blobs WHERE app_id = '{app_id}' ORDER BY size").split("\n")
    check(len(stored) == 2 and all(key.startswith(f"{app_id}/b_") for key in stored), f"two objects, keyed <app_id>/<blob_id>: {sorted(stored)}")
    check(sorted(stored.values()) == [len(small), len(big)], "the objects hold the files' sizes")
    check(all(":s3:" in blob for blob in blobs) and len(blobs) == 2, f"both blobs are recorded in s3: {blobs}")
    check(sql("SELECT count(*) FROM file_chunks") == "0", "the chunks table holds none of their bytes")
    check(s3.get_object(Bucket=BUCKET, Key=sorted(stored, key=stored.get)[1])["Body"].read() == big, "the object in the bucket is the file")

    # The same bytes twice: one object, two files.
    status, again = upload(small, "again.bin")
    check(status == 201 and again["file_id"] != small_file["file_id"], "the same bytes upload again as another file")
    check(len(objects()) == 2, "and are stored once (no new object)")
    request("DELETE", f"/v1/files/{small_file['file_id']}")
    check(len(objects()) == 2, "deleting one of the two files keeps the object")
    status, _, body = request("GET", f"/v1/files/{again['file_id']}")
    check(status == 200 and body == small, "the other still downloads")
    status, _, _ = request("DELETE", f"/v1/files/{again['file_id']}")
    check(status == 204 and len(objects()) == 1, "deleting the last file removes the object")

    # An image: its three derived variants are objects.
    image = png(1200, 900)
    status, photo = upload(image, "photo.png", "image/png")
    check(status == 201 and photo.get("kind") == "image", f"an image upload answers 201 ({status})")
    check(len(objects()) == 4, f"its original, large and thumbnail variants are three objects ({len(objects()) - 1})")
    for variant in ("large", "thumbnail"):
        status, _, body = request("GET", f"/v1/files/{photo['file_id']}?variant={variant}")
        check(status == 200 and (body[:8] == b"\x89PNG\r\n\x1a\n" or body[:3] == b"\xff\xd8\xff"), f"its {variant} variant downloads from the bucket")
    check(sql("SELECT count(*) FROM file_chunks") == "0", "still no chunk in PostgreSQL")
    files_before = sql(f"SELECT count(*) FROM files WHERE app_id = '{app_id}'")
    blobs_before = sql(f"SELECT count(*) FROM file_blobs WHERE app_id = '{app_id}'")
    big_path = STATE_FILE + ".big"
    open(big_path, "wb").write(big)
    json.dump({"big": big_file["file_id"], "big_path": big_path, "kept_path": STATE_FILE + ".kept", "objects": len(objects())},
              open(STATE_FILE, "w"))
    print(f"{checks} passed, 0 failed")
    sys.exit(0)

# moto stopped in the middle of a multipart upload: 503 6000212, and nothing half-stored.
connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
size = 24 * 1024 * 1024
connection.putrequest("POST", "/v1/files")
for name, value in (("Authorization", f"Bearer {KEY}"), ("Parley-File-Name", "cut.bin"), ("Content-Type", "application/octet-stream"),
                    ("Content-Length", str(size))):
    connection.putheader(name, value)
connection.endheaders()
piece = os.urandom(1024 * 1024)
try:
    for n in range(24):
        if n == 12:  # a part is in the bucket by now; the store goes away
            os.kill(MOTO_PID, signal.SIGTERM)
            for _ in range(100):
                try:
                    os.kill(MOTO_PID, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
        connection.send(piece)
except (BrokenPipeError, ConnectionResetError):
    pass  # the server answered before the whole body arrived
response = connection.getresponse()
answer = json.loads(response.read() or b"{}")
check(response.status == 503 and answer.get("code") == 6000212, f"moto stopped mid-upload: {response.status} {answer.get('code')}")
status, answer = upload(os.urandom(1000), "small-after.bin")
check(status == 503 and answer.get("code") == 6000212, f"a small upload with moto stopped: {status} {answer.get('code')}")
check(sql(f"SELECT count(*) FROM files WHERE app_id = '{app_id}'") == files_before, "no file was recorded")
check(sql(f"SELECT count(*) FROM file_blobs WHERE app_id = '{app_id}'") == blobs_before, "no blob row stayed behind")
check(sql("SELECT count(*) FROM file_blobs WHERE state = 'uploading'") == "0", "no upload left uploading")
status, _, _ = request("GET", f"/v1/files/{big_file['file_id']}/meta")
check(status == 200, "the metadata still answers (it is in PostgreSQL)")
print(f"{checks} passed, 0 failed")
