#!/usr/bin/env python3
"""A stand-in for Parley's room routes, to check bench/rooms_reader.c and bench/py/room_driver.py without the server
(not used by bench/rooms.sh itself). asyncio, standard library, 127.0.0.1 only.

usage: room_fake_server.py [serve] [--listen 127.0.0.1:PORT] [--port-file FILE] [--drop-every N] [--dup-every N]
                           [--blast FRAMES_PER_S [--blast-seconds S] [--blast-tick-ms MS]]
Started as `parley serve --listen … --data-dir …` (other arguments are ignored) it prints `PARLEY_KEY=fake-key`, answers
GET /healthz, PATCH /v1/settings and POST /v1/users/import, so bench/rooms.sh can run on it end to end (its figures
are the fake's, of course): put an executable `release/parley` containing
    #!/bin/sh
    exec python3 /path/to/bench/py/room_fake_server.py "$@"
in a directory D and run `BENCH_SKIP_BUILD=1 BENCH_SCRATCH_PATH=D bench/rooms.sh --quick`.

Implements just enough of API.md §10, §11.1 and §14 for the bench: POST /v1/rooms, POST /v1/rooms/{id}/enter|leave,
GET /v1/rooms/{id}, GET /v1/rooms/{id}/online_count, GET /v1/rooms/{id}/members (paged), POST /v1/messages (room
texts), GET /v1/users/{id}/events (SSE, HTTP/1.1 chunked: `retry: 3000`, frames `id/event/data`, `: ping` every
second). Each frame is written as 1-3 chunks split at random places (inside `rbm:` markers too), and several
frames are sometimes joined in one chunk, so the reader's chunk decoding and line reassembly are exercised.
--drop-every N: the stream of u1 misses every Nth message.sent (the reader must report them missing);
--dup-every N: the stream of u2 gets every Nth message.sent twice (the reader must report duplicates).
--blast R: the reader's throughput: after a POST /v1/test/blast, message.sent frames (indexes 0, 1, ...) go to every
open stream at R frames/s in total for --blast-seconds, every stream the same frames, one write (one chunk) per
stream every --blast-tick-ms (10): the reads are bigger than the server's one-chunk-per-frame writes would give.
"""
import argparse
import asyncio
import json
import random
import time

ROOMS = {}       # room_id -> {"members": {user: entered_at}, "created_at": ms}
STREAMS = {}     # user -> list of writers
EVENT_ID = [0]
MSG_COUNT = [0]
ARGS = None


def chunk(data):
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def chunked_frames(frames):
    """The frames as chunks: each frame split in 1-3 pieces at random, and sometimes two frames in one chunk."""
    out, pending = [], b""
    for frame in frames:
        if random.random() < 0.2:
            pending += frame
            continue
        data = pending + frame
        pending = b""
        cuts = sorted(random.sample(range(1, len(data)), k=min(len(data) - 1, random.randint(0, 2))))
        prev = 0
        for cut in cuts + [len(data)]:
            out.append(chunk(data[prev:cut]))
            prev = cut
    if pending:
        out.append(chunk(pending))
    return b"".join(out)


def frame(event_type, data):
    EVENT_ID[0] += 1
    event = {"id": str(EVENT_ID[0]), "type": event_type, "created_at": int(time.time() * 1000), "data": data}
    return f"id: {EVENT_ID[0]}\nevent: {event_type}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


def deliver(users, event_type, data, index=None):
    raw = frame(event_type, data)
    shared = chunked_frames([raw])  # split at random once per event: every stream gets the same chunks
    for user in users:
        for writer in STREAMS.get(user, []):
            if index is not None and ARGS.drop_every and user == "u1" and index % ARGS.drop_every == 0:
                continue
            if index is not None and ARGS.dup_every and user == "u2" and index % ARGS.dup_every == 0:
                writer.write(chunked_frames([raw, raw]))
                continue
            writer.write(shared)


def respond(writer, status, obj=None):
    body = b"" if obj is None else json.dumps(obj).encode()
    reason = {200: "OK", 201: "Created", 404: "Not Found", 409: "Conflict", 403: "Forbidden"}.get(status, "X")
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)


def error(writer, status, code):
    respond(writer, status, {"status": status, "code": code, "title": "error"})


def member_info(room_id, user):
    return {"user_id": user, "name": user, "avatar_url": "", "extended_data": "", "entered_at": ROOMS[room_id]["members"][user]}


def room_object(room_id):
    r = ROOMS[room_id]
    return {"room_id": room_id, "name": "", "member_count": len(r["members"]), "destroy_delay_s": 0,
            "created_by": r["created_by"], "created_at": r["created_at"], "empty_since": None, "destroy_at": None}


async def stream(user, reader, writer):
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n" + chunk(b"retry: 3000\n\n"))
    STREAMS.setdefault(user, []).append(writer)
    try:
        while not reader.at_eof():
            await asyncio.sleep(1)
            writer.write(chunk(b": ping\n\n"))
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        STREAMS[user].remove(writer)
        writer.close()


async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                if line.lower().startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            body = json.loads(await reader.readexactly(length)) if length else {}
            path, _, query = target.partition("?")
            params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
            parts = path.strip("/").split("/")
            if method == "GET" and path == "/healthz":
                respond(writer, 200, {"status": "ok"})
            elif method == "GET" and len(parts) == 4 and parts[:2] == ["v1", "users"] and parts[3] == "events":
                await stream(parts[2], reader, writer)
                return
            elif method == "PATCH" and path == "/v1/settings":
                respond(writer, 200, body)
            elif method == "POST" and path == "/v1/users/import":
                respond(writer, 200, {"results": [{"index": n, "id": u["user_id"], "ok": True} for n, u in enumerate(body["users"])]})
            elif method == "POST" and path == "/v1/rooms":
                room_id = body["room_id"]
                if room_id in ROOMS:
                    error(writer, 409, 6000323)
                else:
                    now = int(time.time() * 1000)
                    ROOMS[room_id] = {"members": {body["creator"]: now}, "created_by": body["creator"], "created_at": now}
                    deliver([body["creator"]], "room.created", {"room": room_object(room_id)})
                    deliver(ROOMS[room_id]["members"], "room.member_joined", {"room_id": room_id, "members": [member_info(room_id, body["creator"])]})
                    respond(writer, 201, room_object(room_id))
            elif len(parts) >= 3 and parts[:2] == ["v1", "rooms"]:
                room_id = parts[2]
                room = ROOMS.get(room_id)
                if room is None:
                    error(writer, 404, 6000322)
                elif method == "POST" and parts[3:] == ["enter"]:
                    user = body["user_id"]
                    already = user in room["members"]
                    if not already:
                        room["members"][user] = int(time.time() * 1000)
                        deliver(room["members"], "room.member_joined", {"room_id": room_id, "members": [member_info(room_id, user)]})
                    respond(writer, 200, {"room": room_object(room_id), "created": False, "already_member": already})
                elif method == "POST" and parts[3:] == ["leave"]:
                    user = body["user_id"]
                    if user not in room["members"]:
                        error(writer, 403, 6000321)
                    else:
                        audience = list(room["members"])
                        del room["members"][user]
                        deliver(audience, "room.member_left", {"room_id": room_id, "user_ids": [user], "reason": "left"})
                        respond(writer, 200, {"room_id": room_id, "user_id": user})
                elif method == "GET" and parts[3:] == ["online_count"]:
                    respond(writer, 200, {"room_id": room_id, "count": len(room["members"])})
                elif method == "GET" and parts[3:] == []:
                    respond(writer, 200, room_object(room_id))
                elif method == "GET" and parts[3:] == ["members"]:
                    ordered = sorted(room["members"], key=lambda u: (room["members"][u], u))
                    start = int(params.get("cursor", "0"))
                    limit = int(params.get("limit", "20"))
                    page = ordered[start:start + limit]
                    respond(writer, 200, {"items": [member_info(room_id, u) for u in page],
                                          "next_cursor": str(start + limit) if start + limit < len(ordered) else None})
                else:
                    error(writer, 404, 7000006)
            elif method == "POST" and path == "/v1/messages":
                room = ROOMS.get(body["to"])
                if room is None:
                    error(writer, 404, 6000204)
                elif body["from"] not in room["members"]:
                    error(writer, 403, 6000321)
                else:
                    MSG_COUNT[0] += 1
                    now = int(time.time() * 1000)
                    message = {"message_id": f"m{MSG_COUNT[0]:020d}", "conversation_type": "room", "from": body["from"],
                               "to": body["to"], "type": body["type"], "body": body["body"], "seq": None, "stored": False,
                               "timestamp": now, "priority": body.get("priority", 2), "extended_data": "",
                               "reply_to": None, "repeat_count": 1, "edited_at": None, "revoked": False,
                               "sender": {"user_id": body["from"], "name": "User 1", "avatar_url": ""}}
                    index = None
                    text = body["body"].get("text", "")
                    if text.startswith("rbm:"):
                        index = int(text.split(":")[1])
                    deliver(list(room["members"]), "message.sent", {"message": message}, index)
                    respond(writer, 201, message)
            elif method == "POST" and path == "/v1/test/blast":
                asyncio.ensure_future(blast())
                respond(writer, 200, {"blast": True})
            else:
                error(writer, 404, 7000006)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def blast():
    """Reader throughput: message.sent frames to every open stream at ARGS.blast frames/s in total."""
    writers = [w for ws in STREAMS.values() for w in ws]
    if not writers:
        return
    text_pad = "x" * 40
    tick = ARGS.blast_tick_ms / 1000
    per_stream_rate = ARGS.blast / len(writers)  # frames per stream per second
    index, started = 0, time.monotonic()
    while time.monotonic() - started < ARGS.blast_seconds:
        due = int((time.monotonic() - started) * per_stream_rate)  # frames per stream owed by now
        if due > index:
            frames = []
            for _ in range(due - index):
                message = {"message_id": f"m{index:020d}", "conversation_type": "room", "from": "u1", "to": "bench",
                           "type": 1, "body": {"text": f"rbm:{index}: {text_pad}"}, "seq": None, "stored": False,
                           "timestamp": int(time.time() * 1000), "priority": 2, "extended_data": "", "reply_to": None,
                           "repeat_count": 1, "sender": {"user_id": "u1", "name": "User 1", "avatar_url": ""}}
                frames.append(frame("message.sent", {"message": message}))
                index += 1
            data = chunk(b"".join(frames))
            for w in writers:
                w.write(data)
        await asyncio.sleep(tick)
    print(f"blast: {index} messages per stream, {len(writers)} streams", flush=True)


async def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file")
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--drop-every", type=int, default=0)
    parser.add_argument("--dup-every", type=int, default=0)
    parser.add_argument("--blast", type=float, default=0)
    parser.add_argument("--blast-seconds", type=float, default=10)
    parser.add_argument("--blast-tick-ms", type=float, default=10)
    ARGS, _ = parser.parse_known_args()  # `serve`, `--data-dir …`: as parley is started
    host, _, port = ARGS.listen.rpartition(":")
    if host != "127.0.0.1":
        raise SystemExit("loopback only")
    server = await asyncio.start_server(handle, host, int(port), backlog=4096)
    if ARGS.port_file:
        with open(ARGS.port_file, "w") as f:
            f.write(str(server.sockets[0].getsockname()[1]))
    print("PARLEY_KEY=fake-key", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
