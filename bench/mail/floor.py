"""The floor of a lone mail: what the path of one mail costs with the same
libraries and durability as mailrun, and nothing else.

    .venv/bin/python bench/mail/floor.py [--mails 500] [--rate 50] [--json]

Two processes stand in for the hub and a sidecar, on a real nats-server
(uvloop, httptools, msgspec, nats-py, sqlite3 in WAL with ``synchronous =
FULL``), and do what a lone mail makes mailrun do, in the fewest steps:

- hub: ``POST /mail`` parsed; the mail's row inserted and committed
  (fsync); 202; a request with the mail to the sidecar; its answer marked
  in a commit without fsync; later the sidecar's events request: its
  commit (fsync) and the answer;
- sidecar: the request's frame stored and committed (fsync) and answered;
  the handler (a line appended to a file); the step's commit (fsync) with
  an outbox row; the events request to the hub; the answer marked (no
  fsync).

No task groups, actors, lanes, fences or retries: one coroutine a mail on
each side. The client sends ``--mails`` single POSTs at ``--rate`` a
second (an offered rate), waits until the handler saw every one, and
prints the CPU each process spent a mail (``psutil``) and the
POST-to-handler latency. mailrun's own figure is ``bench/mail/lone_mail.py``;
the difference is what mailrun's structure costs above its libraries
(docs/performance.md, "Lone mails").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httptools
import msgspec
import nats
import psutil
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

INBOUND, EVENTS = "floor.inbound", "floor.events"


def open_db(path: Path, schema: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.executescript(schema)
    return conn


def commit(
    conn: sqlite3.Connection, durable: bool, *statements: tuple[str, tuple[Any, ...]]
) -> None:
    if not durable:
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("BEGIN IMMEDIATE")
    for sql, args in statements:
        conn.execute(sql, args)
    conn.execute("COMMIT")
    if not durable:
        conn.execute("PRAGMA synchronous = FULL")


class Mail(msgspec.Struct):
    to: str
    subject: str


HUB_SCHEMA = """
CREATE TABLE IF NOT EXISTS dispatch (id INTEGER PRIMARY KEY, address TEXT, subject TEXT,
    status TEXT, created_at REAL);
CREATE INDEX IF NOT EXISTS dispatch_status ON dispatch (status);
CREATE TABLE IF NOT EXISTS event (id INTEGER PRIMARY KEY, dispatch_id INTEGER, payload BLOB);
"""


async def hub(nats_url: str, db: Path, port: int) -> None:
    conn = open_db(db, HUB_SCHEMA)
    nc = await nats.connect(nats_url)
    decode_mail = msgspec.json.Decoder(Mail).decode
    encode = msgspec.msgpack.encode
    decode = msgspec.msgpack.decode

    async def deliver(row_id: int, mail: Mail) -> None:
        await nc.request(INBOUND, encode((row_id, mail.subject)), timeout=5)
        commit(conn, False, ("UPDATE dispatch SET status = 'delivered' WHERE id = ?", (row_id,)))

    async def on_events(msg: Any) -> None:
        row_id, payload = decode(msg.data)
        commit(
            conn,
            True,
            ("UPDATE dispatch SET status = 'processed' WHERE id = ?", (row_id,)),
            ("INSERT INTO event (dispatch_id, payload) VALUES (?, ?)", (row_id, payload)),
        )
        await msg.respond(b"ok")

    await nc.subscribe(EVENTS, cb=on_events)
    loop = asyncio.get_running_loop()

    class Http(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport, self.body = transport, b""
            self.parser = httptools.HttpRequestParser(self)

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_body(self, body: bytes) -> None:
            self.body += body

        def on_message_complete(self) -> None:
            mail, self.body = decode_mail(self.body), b""
            cur = conn.cursor()
            conn.execute("BEGIN IMMEDIATE")
            cur.execute(
                "INSERT INTO dispatch (address, subject, status, created_at) VALUES (?, ?, ?, ?)",
                (mail.to, mail.subject, "reserved", time.time()),
            )
            conn.execute("COMMIT")
            answer = b'{"accepted":true}'
            self.transport.write(
                b"HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(answer), answer)
            )
            loop.create_task(deliver(cur.lastrowid or 0, mail))  # noqa: RUF006 - a stand-in

    server = await loop.create_server(Http, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


SIDECAR_SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox (dispatch_id INTEGER PRIMARY KEY, envelope BLOB, state TEXT);
CREATE TABLE IF NOT EXISTS outbox (id INTEGER PRIMARY KEY, payload BLOB);
CREATE TABLE IF NOT EXISTS step (dispatch_id INTEGER PRIMARY KEY, result BLOB);
"""


async def sidecar(nats_url: str, db: Path, log: Path) -> None:
    conn = open_db(db, SIDECAR_SCHEMA)
    nc = await nats.connect(nats_url)
    encode, decode = msgspec.msgpack.encode, msgspec.msgpack.decode

    async def on_inbound(msg: Any) -> None:
        dispatch_id, subject = decode(msg.data)
        commit(conn, True, ("INSERT INTO inbox VALUES (?, ?, 'pending')", (dispatch_id, msg.data)))
        await msg.respond(b"ok")
        with log.open("a") as out:  # the handler
            out.write(f"{subject} {time.time()}\n")
        payload = encode({"dispatch": dispatch_id, "status": "processed"})
        cur = conn.cursor()
        conn.execute("BEGIN IMMEDIATE")
        cur.execute("UPDATE inbox SET state = 'done' WHERE dispatch_id = ?", (dispatch_id,))
        cur.execute("INSERT INTO step VALUES (?, ?)", (dispatch_id, b""))
        cur.execute("INSERT INTO outbox (payload) VALUES (?)", (payload,))
        conn.execute("COMMIT")
        outbox_id = cur.lastrowid
        await nc.request(EVENTS, encode((dispatch_id, payload)), timeout=5)
        commit(conn, False, ("DELETE FROM outbox WHERE id = ?", (outbox_id,)))

    await nc.subscribe(INBOUND, cb=on_inbound)
    await nc.flush()
    (log.parent / "ready").touch()
    await asyncio.Event().wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


async def handled(log: Path, count: int, timeout: float = 60.0) -> dict[str, str]:
    """The handler's lines (subject: time), once ``count`` are there or at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        text = await asyncio.to_thread(lambda: log.read_text() if log.exists() else "")
        seen = dict(line.split() for line in text.splitlines())
        if len(seen) >= count or time.monotonic() > deadline:
            return seen
        await asyncio.sleep(0.02)


async def drive(port: int, mails: int, rate: float, log: Path) -> dict[str, Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def post(subject: str) -> None:
        body = json.dumps({"to": "floor@example.org", "subject": subject}).encode()
        writer.write(
            b"POST /mail HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(len(b'{"accepted":true}'))

    await post("warm")
    await handled(log, 1)
    procs = [p for p in psutil.Process().children() if "--role" in " ".join(p.cmdline())]
    before = {" ".join(p.cmdline()).split("--role ")[1].split()[0]: cpu(p) for p in procs}
    posted: dict[str, float] = {}
    start = time.monotonic()
    for i in range(mails):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        subject = f"m{i:06d}"
        posted[subject] = time.time()
        await post(subject)
    seen = await handled(log, mails + 1)
    after = {" ".join(p.cmdline()).split("--role ")[1].split()[0]: cpu(p) for p in procs}
    writer.close()
    delays = sorted((float(seen[s]) - posted[s]) * 1000 for s in posted if s in seen)
    return {
        "mails": mails,
        "rate_per_s": rate,
        "post_to_handler_ms": {
            "p50": round(delays[len(delays) // 2], 2),
            "p99": round(delays[int(len(delays) * 0.99)], 2),
        },
        "cpu_ms_per_mail": {k: round((after[k] - before[k]) / mails * 1000, 3) for k in after},
        "all_handled": len(delays) == mails,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=500)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--json", action="store_true", help="JSON (the only output)")
    parser.add_argument("--role", choices=["hub", "sidecar"], help=argparse.SUPPRESS)
    parser.add_argument("--nats", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "hub":
        uvloop.run(hub(args.nats, Path(args.dir) / "hub.db", args.port))
        return
    if args.role == "sidecar":
        uvloop.run(
            sidecar(args.nats, Path(args.dir) / "sidecar.db", Path(args.dir) / "handled.log")
        )
        return
    from tests.support import NatsServerProcess

    with tempfile.TemporaryDirectory(prefix="mailrun-floor-") as tmp:
        server = NatsServerProcess()
        server.start_sync()
        port = free_port()
        me = [sys.executable, __file__, "--nats", f"nats://127.0.0.1:{server.port}", "--dir", tmp]
        children = [
            subprocess.Popen([*me, "--role", "hub", "--port", str(port)]),
            subprocess.Popen([*me, "--role", "sidecar"]),
        ]
        try:
            for _ in range(3000):  # both up: the hub listens, the sidecar subscribed
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", port)) == 0 and (Path(tmp) / "ready").exists():
                        break
                time.sleep(0.01)
            figures = uvloop.run(drive(port, args.mails, args.rate, Path(tmp) / "handled.log"))
        finally:
            for child in children:
                child.terminate()
                child.wait(5)
            server.stop_sync()
    print(json.dumps(figures, indent=2))
    if not figures["all_handled"]:
        sys.exit("FAILED: a mail was not handled")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
