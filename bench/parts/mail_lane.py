"""The hub's HTTP app alone: CPU per ``POST /mail`` on the event loop's thread
and on the process's other threads, without sockets or other processes.

    .venv/bin/python bench/parts/mail_lane.py [--mails 20000] [--senders 64] [--message-ids]
        [--json]

Builds the hub's ASGI app over a real store (as the API tests do, on uvloop
as the hub runs), deploys one workflow and has ``--senders`` tasks call the
app with ``POST /mail`` requests, ``--mails`` in all, each body whole at the
call (as a client writes head and body at once). It prints mails/s and the
CPU seconds per mail of the loop's thread (the app: auth, the mail lane,
the acceptor, and the accept transactions, which run there: docs/hub.md,
"Store") and of the others (the store's connection threads, which a
transaction uses only when SQLite's lock is held elsewhere or it is
heavy). HTTP parsing, delivery and ingestion are not in it. This is the
long way: the hub's HTTP server answers most mail in its protocol, without
the app (docs/hub.md, "HTTP"); ``bench/mail/bench_e2e.py`` measures that.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import anyio
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests' helpers

from hub.api.http import BODY_ARRIVED_EXTENSION
from tests.hub.api.harness import TOKEN, api


async def bench(mails: int, senders: int, message_ids: bool, figures: dict[str, object]) -> None:
    with tempfile.TemporaryDirectory(prefix="mailrun-lane-") as tmp:
        async with api(Path(tmp)) as hub:
            address = (await hub.deploy("bench"))["address"]
            head = [(b"host", b"hub"), (b"authorization", f"Bearer {TOKEN}".encode()),
                    (b"content-type", b"application/json")]  # fmt: skip

            async def post(n: int) -> None:
                mail = {"to": address, "subject": f"m{n}", "from": "a@b.c", "body": "hello"}
                if message_ids:
                    mail["message_id"] = f"<{n}@bench.example>"
                body = msgspec.json.encode(mail)
                scope = {
                    "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                    "method": "POST", "scheme": "http", "path": "/mail", "raw_path": b"/mail",
                    "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
                    "server": ("127.0.0.1", 80),
                    "headers": [*head, (b"content-length", b"%d" % len(body))],
                    "extensions": {BODY_ARRIVED_EXTENSION: lambda: True},
                }  # fmt: skip
                status: list[int] = []

                async def receive() -> dict[str, object]:
                    return {"type": "http.request", "body": body, "more_body": False}

                async def send(message: dict[str, object]) -> None:
                    if message["type"] == "http.response.start":
                        status.append(int(message["status"]))  # type: ignore[call-overload]

                await hub.app(scope, receive, send)
                if status != [202]:
                    raise RuntimeError(f"mail {n} answered {status}")

            async def sender(first: int, count: int) -> None:
                for n in range(first, first + count):
                    await post(n)

            await sender(-100, 100)  # warm-up
            each = mails // senders
            began = time.perf_counter()
            loop, process = time.thread_time(), time.process_time()
            async with anyio.create_task_group() as tg:
                for k in range(senders):
                    tg.start_soon(sender, k * each, each)
            elapsed = time.perf_counter() - began
            loop, process = time.thread_time() - loop, time.process_time() - process
            sent = each * senders
            figures["mails"] = sent
            figures["per_s"] = sent / elapsed
            figures["loop_us_per_mail"] = 1e6 * loop / sent
            figures["other_threads_us_per_mail"] = 1e6 * (process - loop) / sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mails", type=int, default=20_000)
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument("--message-ids", action="store_true", help="each mail names a message id")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if min(args.mails, args.senders) < 1 or args.mails < args.senders:
        parser.error("--mails and --senders must be positive, and mails at least senders")
    figures: dict[str, object] = {"message_ids": args.message_ids}
    anyio.run(
        bench, args.mails, args.senders, args.message_ids, figures,
        backend_options={"use_uvloop": True},
    )  # fmt: skip
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{figures['mails']} POST /mail from {args.senders} senders: {figures['per_s']:.0f}/s")
    print(f"loop thread      {figures['loop_us_per_mail']:6.1f} us CPU per mail")
    print(
        f"other threads    {figures['other_threads_us_per_mail']:6.1f} us CPU per mail"
        " (the store's)"
    )


if __name__ == "__main__":
    main()
