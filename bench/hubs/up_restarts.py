"""What a sender sees while `mailrun up` restarts its hub: refused, reset and
waiting requests, and every mail processed once

    .venv/bin/python bench/hubs/up_restarts.py [--kills 5] [--every 3] [--rate 100] [--json]

Starts `mailrun up` in a temporary dir on free loopback ports and deploys a
workflow that counts. A sender posts one mail at a time at ``--rate`` a
second, each on a new connection, each with its own ``message_id``; a
mail whose request fails is sent again, same id, until it is answered
(a retry of an accepted mail is answered as a duplicate, not taken twice).
Every ``--every`` seconds the hub is SIGKILLed, ``--kills`` times; `up`
starts it again. Printed: how the requests ended (answered, refused at
connect, failed after connecting), how long each mail took from its first
try to its answer (those sent while the hub was down are the slow tail),
and whether every mail was processed exactly once. `up` holds the hub's listening socket
across restarts (docs/operations.md), so a sender should meet no refusal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

from bench.mail.bench_e2e import (
    COUNTER,
    keep_and_json,
    run_in_scratch,
    spread,
    start_mailrun,
    stop_up,
)
from bench.mail.slow_clients import hub_process
from tests.support import admit, free_port, wait_for


async def bench(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    state, http = tmp / "state", f"127.0.0.1:{free_port()}"
    up = start_mailrun(["up", "--state-dir", str(state), "--http", http], tmp / "up.log")
    outcomes: Counter[str] = Counter()
    answered: list[float] = []
    mails = 0
    try:
        # No keep-alive: each request its own connection, as most senders' are.
        fresh = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=f"http://{http}", timeout=30, limits=fresh) as client:
            await admit(client, state / "admin-token")
            r = await client.post(
                "/workflows/deployments", json={"name": "count", "source": COUNTER}
            )
            assert r.status_code == 201, r.text
            dep = r.json()

            async def send(n: int) -> None:
                mail = {"to": dep["address"], "subject": f"{n}", "message_id": f"<{n}@bench>"}
                started = time.perf_counter()
                while True:
                    try:
                        r = await client.post("/mail", json=mail)
                    except httpx.ConnectError:
                        outcomes["refused at connect"] += 1
                    except httpx.TransportError:
                        outcomes["failed after connecting"] += 1
                    else:
                        if r.status_code in (200, 202):
                            outcomes["answered"] += 1
                            answered.append(time.perf_counter() - started)
                            return
                        outcomes[f"answered {r.status_code}"] += 1
                    await anyio.sleep(0.05)  # a sender's pause before it tries again

            async def kill_hubs() -> None:
                for _ in range(args.kills):
                    await anyio.sleep(args.every)
                    hub = await wait_for(lambda: hub_process(up.pid), what="the hub process")
                    hub.kill()

            async with anyio.create_task_group() as senders:
                done = anyio.Event()

                async def killer() -> None:
                    await kill_hubs()
                    await anyio.sleep(args.every)  # the last restart's mail, and some after
                    done.set()

                senders.start_soon(killer)
                while not done.is_set():
                    senders.start_soon(send, mails)
                    mails += 1
                    await anyio.sleep(1 / args.rate)

            async def processed() -> int:
                r = await client.get("/runs", params={"deployment": dep["id"]})
                return sum((run.get("state") or {}).get("count", 0) for run in r.json()["runs"])

            await wait_for(
                lambda: _at_least(processed, mails), timeout=120, what="every mail processed"
            )
            counted = await processed()
    finally:
        await stop_up(up)
    return {
        "kills": args.kills,
        "mails": mails,
        "processed": counted,
        "requests": dict(sorted(outcomes.items())),
        "answered": spread(answered),
    }


async def _at_least(count: Any, wanted: int) -> bool:
    return bool(await count() >= wanted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5, help="hub kills")
    parser.add_argument("--every", type=float, default=3.0, help="seconds between kills")
    parser.add_argument("--rate", type=float, default=100.0, help="mails a second")
    keep_and_json(parser)
    args = parser.parse_args()
    if args.kills < 1 or args.every <= 0 or args.rate <= 0:
        parser.error("--kills, --every and --rate must be positive")
    figures = run_in_scratch("mailrun-up-restarts-", bench, args)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    f = figures
    print(f"{f['mails']} mails at {args.rate:g}/s, the hub SIGKILLed {f['kills']} times")
    for outcome, n in f["requests"].items():
        print(f"  requests {outcome:24} {n}")
    a = f["answered"]
    print(f"first try to answer p50 / p99 / max  {a['p50_ms']} / {a['p99_ms']} / {a['max_ms']} ms")
    once = "exactly once" if f["processed"] == f["mails"] else f"{f['processed']} times"
    print(f"processed                    {once}")
    sys.exit(0 if f["processed"] == f["mails"] else 1)


if __name__ == "__main__":
    main()
