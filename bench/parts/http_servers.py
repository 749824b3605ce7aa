"""The hub's HTTP front, server against server: CPU per request and rate.

    .venv/bin/python bench/parts/http_servers.py [--requests 20000] [--senders 64] [--runs 1]
        [--json]

Serves the same `POST /mail` answer (`bench/parts/_asgi_apps.py`: a bare ASGI
callable, as the hub's mail lane, or a Starlette route) from a server
process of its own on a free loopback port, and drives it with 64
keep-alive senders of the benchmarks' load client (`bench/parts/_http.py`). Prints
requests/s and the server's CPU per request (its children included: granian
serves from a worker process). The servers:

- uvicorn with h11 on asyncio's loop (uvicorn's pure-Python defaults) and
  with httptools on uvloop, when installed: it is in the ``bench`` extra,
  not a dependency of mailrun;
- the hub's own ``HttpServer`` (``hub/api/http/``: httptools, uvloop, a
  response in one write);
- granian (Rust HTTP, ASGI, one worker on uvloop), when installed: in the
  ``bench`` extra too;
- a bare asyncio protocol on uvloop that parses with httptools and writes a
  canned answer: no ASGI at all, the floor under any of them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.parts._http import Pool
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
BODY = b'{"to":"flow@mailrun.local","subject":"m","body":"x"}'
HEADERS = {"Content-Type": "application/json"}

APPS = {"Starlette": "bench.parts._asgi_apps:starlette", "bare ASGI": "bench.parts._asgi_apps:bare"}


def servers(port: int) -> dict[str, list[str]]:
    """Each server's command line, serving on ``port``; [] if not installed."""
    at = ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    granian = shutil.which("granian", path=str(Path(sys.executable).parent))
    uvicorn = find_spec("uvicorn") is not None and find_spec("h11") is not None
    found: dict[str, list[str]] = {}
    for http, loop in (("h11", "asyncio"), ("httptools", "uvloop")):
        for name, app in APPS.items():
            argv = [sys.executable, "-m", "uvicorn", *at, "--http", http, "--loop", loop, app]
            found[f"uvicorn {http}, {loop}, {name}"] = argv if uvicorn else []
    for name, app in APPS.items():
        argv = ["--interface", "asgi", "--workers", "1", "--loop", "uvloop", *at, app]
        found[f"granian, uvloop, {name}"] = [granian, *argv] if granian else []
    found["the hub's HttpServer (httptools, uvloop), bare ASGI"] = [
        sys.executable,
        "-c",
        f"from bench.parts._asgi_apps import hub_server; hub_server({port})",
    ]
    found["bare asyncio protocol + httptools, uvloop (no ASGI)"] = [
        sys.executable,
        "-c",
        f"from bench.parts._asgi_apps import floor; floor({port})",
    ]
    return found


def cpu_of(process: psutil.Process) -> float:
    total = 0.0
    for p in [process, *process.children(recursive=True)]:
        times = p.cpu_times()
        total += times.user + times.system
    return total


async def up(port: int, deadline: float) -> None:
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not listen within 30 s") from None
            await asyncio.sleep(0.05)  # polling for the server's port, under a deadline
            continue
        writer.close()
        return


async def drive(port: int, requests: int, senders: int) -> None:
    pool = Pool("127.0.0.1", port)
    left = requests

    async def sender() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            status, _ = await pool.request("POST", "/mail", BODY, HEADERS)
            if status != 202:
                raise RuntimeError(f"the server answered {status}")

    await asyncio.gather(*(sender() for _ in range(senders)))
    pool.close()


def measure(argv: list[str], requests: int, senders: int, port: int) -> tuple[float, float]:
    server = subprocess.Popen(argv, cwd=ROOT)
    try:
        asyncio.run(up(port, time.monotonic() + 30))
        asyncio.run(drive(port, min(2000, requests), senders))  # warm-up
        watched = psutil.Process(server.pid)
        cpu, began = cpu_of(watched), time.perf_counter()
        asyncio.run(drive(port, requests, senders))
        elapsed, used = time.perf_counter() - began, cpu_of(watched) - cpu
    finally:
        server.terminate()
        server.wait(30)
    return requests / elapsed, used / requests * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument("--runs", type=int, default=1, help="medians of this many runs")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    found: dict[str, dict[str, float] | None] = {}
    for name in servers(0):
        figures = []
        for _ in range(args.runs):
            port = free_port()
            argv = servers(port)[name]
            if not argv:
                break
            figures.append(measure(argv, args.requests, args.senders, port))
        found[name] = (
            {
                "per_s": statistics.median(f[0] for f in figures),
                "cpu_ms": statistics.median(f[1] for f in figures),
            }
            if figures
            else None
        )
    if args.json:
        print(json.dumps(found))
        return
    print(f"{args.requests} POST /mail, {args.senders} keep-alive senders, medians of {args.runs}")
    print(f"{'server':56} {'requests/s':>10} {'CPU ms/req':>10}")
    for name, got in found.items():
        if got is None:
            print(f"{name:56} not installed (pip install -e '.[bench]')")
        else:
            print(f"{name:56} {got['per_s']:10.0f} {got['cpu_ms']:10.3f}")


if __name__ == "__main__":
    main()
