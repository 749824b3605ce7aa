"""What ``mailrun up``'s half-second poll of the hub's deployments costs
``up`` itself among many deployments, the hub left out; with ``--side
hub``, what the hub's answer to a wake costs the hub among as many asleep.

    .venv/bin/python bench/wakes/up_poll.py [--deployments 2000] [--polls 400] [--side up|hub]
        [--json]

The poll's work in ``up`` (hub/up/supervisor.py, ``_reconcile``): the
answer applied to the listing kept (hub/up/listing.py), the statuses shown (of what changed),
the NATS users derived and compared with those admitted (hub/up/nats.py,
which rewrites the config only when they differ), the fleet synced
(hub/up/fleet/fleet.py, with what changed; this host has no sidecar for any, so
none starts, and every one is looked at again as unsettled: a host whose
records are there settles them). Every
answer names one deployment woken (``deployed``) and the one woken in the
answer before asleep again; the CPU of a poll
(``time.process_time``) is the median of five rounds of ``--polls``.

``--side hub``: a SQLite store (a scratch file, fsync off) of
``--deployments`` deployments, all asleep, and the hub's ``Sleepers``
(hub/wire/sessions/sleepers.py); ``--polls`` times, a mail is accepted for
one of them (not priced), its poll with the cursor of the answer before
already waiting, and the CPU from the poke until the poll has its answer
is priced (the wake list read, in the hub's loop), the median of five
rounds.

Run with ``PYTHONPATH`` on another checkout to price its code.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support, with --side hub

from hub.natsauth import new_user_key
from hub.up.fleet import Fleet
from hub.up.listing import Listing
from hub.up.nats import EmbeddedConfig
from runtime import Subjects, new_id


def round_ms(deployments: list[dict[str, Any]], polls: int, tmp: Path) -> tuple[float, int]:
    """CPU ms a poll, over ``polls`` polls each naming one changed deployment,
    and how many users the config admits after them."""
    config = EmbeddedConfig(
        tmp / "nats.conf",
        host="127.0.0.1",
        port=4222,
        server_name="bench",
        hub_user=new_user_key().public,
        subjects=Subjects("mailrun"),
    )
    fleet = Fleet(lambda dep: None, sleeps=True, max_awake=50, say=print)
    listing = Listing()
    listing.apply({"deployments": deployments, "cursor": 1, "whole": True}, 0.0)
    config.admit(listing.users(0.0), None)
    started = time.process_time()
    for n in range(polls):
        # One wakes, the one woken a poll before falls asleep again: a few
        # are awake at a time, as among 2,000 mailed hourly.
        woken = dict(deployments[n % len(deployments)], status="deployed")
        slept = dict(deployments[(n - 1) % len(deployments)], status="asleep")
        moved = [woken, slept] if n else [woken]
        listing.apply({"deployments": moved, "cursor": n + 2, "whole": False}, float(n))
        if hasattr(listing, "changed"):  # as _reconcile does: what changed alone
            among = None if listing.whole else listing.changed | fleet.unsettled
            listed = listing.statuses(fleet.asleep, among)
            config.admit(listing.users(float(n)), None)
            fleet.sync(listed, float(n), whole=listing.whole)
        else:  # a checkout from before, which passed over every deployment
            listed = listing.statuses(fleet.asleep)
            config.admit(listing.users(float(n)), None)
            fleet.sync(listed, float(n))
    return (time.process_time() - started) / polls * 1000, len(config.users)


async def hub_round_ms(path: Path, count: int, polls: int) -> float:
    """CPU ms from a poke to the long poll's answer, among ``count`` asleep
    (``polls`` of them mailed, each once)."""
    from hub.store import Fence, Trigger, accept_triggers, grant_sleep, open_store, wake_deployment
    from hub.wire.sessions import Sleepers
    from runtime.sqlite import Synchronous
    from tests.support.harnesses.wire import deploy

    async with await open_store(path, synchronous=Synchronous.NORMAL) as store:
        deps = [await deploy(store, f"flow{n}") for n in range(count)]
        for dep in deps:
            await store.transact(partial(grant_sleep, fence=Fence(dep.id, 0)))
        sleepers = Sleepers(store)
        await sleepers.load()
        answers: list[tuple[str, float]] = []

        async def poll(after: str, answered: anyio.Event) -> None:
            _, cursor = await sleepers.wakes_after(25, after)
            answers.append((cursor, time.process_time()))
            answered.set()

        _, cursor = await sleepers.wakes_after(0, None)
        spent = 0.0
        for n in range(polls):
            dep = deps[n * count // polls]
            answered = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll, cursor, answered)
                await anyio.wait_all_tasks_blocked()
                trigger = Trigger(address=dep.address, subject=f"m{n}", sender="a@b.c")
                _, accepted = await store.transact(partial(accept_triggers, triggers=[trigger]))
                poked = time.process_time()
                sleepers.poke(accepted)
                await answered.wait()
            cursor, at = answers[-1]
            spent += at - poked
            # Welcomed, as its sidecar would be: not asleep, not named again.
            await store.transact(partial(wake_deployment, deployment_id=dep.id))
            sleepers.woke(dep.id)
        return spent / polls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--polls", type=int, default=400)
    parser.add_argument("--side", choices=["up", "hub"], default="up")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.side == "hub":
        rounds = []
        for _ in range(5):
            with tempfile.TemporaryDirectory() as tmp:
                run = partial(hub_round_ms, Path(tmp) / "hub.db", args.deployments, args.polls)
                rounds.append(anyio.run(run))
        median = round(statistics.median(rounds), 3)
        if args.json:
            print(json.dumps({"deployments": args.deployments, "cpu_ms_per_answer": median}))
        else:
            print(
                f"{args.deployments} asleep: {median} ms of the hub's CPU from a poke to"
                f" the wake's answer (rounds {[round(r, 3) for r in rounds]})"
            )
        return
    deployments = [
        {"id": new_id("dep"), "status": "asleep", "nats_user": new_user_key().public}
        for _ in range(args.deployments)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        done = [round_ms(deployments, args.polls, Path(tmp)) for _ in range(5)]
    rounds = [ms for ms, _ in done]
    figures = {
        "deployments": args.deployments,
        "polls": args.polls,
        # Asleep or awake, every deployment stays admitted to NATS.
        "admitted": min(admitted for _, admitted in done),
        "cpu_ms_per_poll": round(statistics.median(rounds), 3),
        "rounds_ms": [round(r, 3) for r in rounds],
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(
            f"{args.deployments} deployments, a wake and a sleep a poll: "
            f"{figures['cpu_ms_per_poll']} ms of up's CPU a poll (rounds {figures['rounds_ms']})"
        )


if __name__ == "__main__":
    main()
