"""What ``mailrun up``'s half-second poll of the hub's deployments costs
``up`` itself among many deployments, the hub left out.

    .venv/bin/python bench/up_poll.py [--deployments 2000] [--polls 400] [--json]

The poll's work in ``up`` (hub/up/supervisor.py, ``_reconcile``): the
answer applied to the listing kept (hub/up/listing.py), the statuses shown (of what changed),
the NATS users derived and compared with those admitted (hub/up/nats.py,
which rewrites the config only when they differ), the fleet synced
(hub/up/fleet.py, with what changed; this host has no sidecar for any, so
none starts, and every one is looked at again as unsettled: a host whose
records are there settles them). Every
answer names one deployment woken (``deployed``) and the one woken in the
answer before asleep again; the CPU of a poll
(``time.process_time``) is the median of five rounds of ``--polls``.
Run with ``PYTHONPATH`` on another checkout to price its code.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--polls", type=int, default=400)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
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
