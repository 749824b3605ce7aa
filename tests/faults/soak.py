"""The long fault run: N seeded rounds of randomly mixed faults under load.

    .venv/bin/python -m tests.faults.soak --rounds 200 --seed 1

Each round picks a fault of the matrix (``scenarios.FAULTS``) and its
parameters from the seed, adds light network noise (duplicated and late
frames) to some rounds, runs it against a fresh deployment under a workload
(``rounds.run_round``, ``--scale`` times the matrix's mails per client), and
checks the history. Rounds share a cluster
(nats-server and the hub as real processes) for ``--rounds-per-cluster``
rounds, so the hub carries the state of earlier rounds and faults. At the
end a table per fault: rounds, triggers, lost, duplicated, reordered, max
recovery time. The exit status is 1 if any round lost, duplicated or
reordered anything, or failed otherwise (its history and the cluster's logs
are kept under ``--dir``).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from .cluster import Cluster, running_cluster
from .rounds import Fault, Inject, Outcome, Round, run_round
from .scenarios import FAULTS

QUIET = frozenset({"F3", "F5"})
"""Faults that are network noise already."""


@dataclass
class Row:
    rounds: int = 0
    noisy: int = 0
    triggers: int = 0
    accepted: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    refused: int = 0
    failed: int = 0
    recoveries: list[float] = field(default_factory=list)

    def add(self, out: Outcome, noisy: bool) -> None:
        r = out.result
        self.rounds += 1
        self.noisy += noisy
        self.triggers += r.sent
        self.accepted += r.accepted
        self.lost += len(r.lost)
        self.duplicated += len(r.duplicated)
        self.reordered += len(r.reordered)
        self.refused += len(r.refused)
        self.failed += not out.ok
        self.recoveries.append(out.recovery)


def noisy(inject: Inject, rate: float) -> Inject:
    """``inject`` with some deliveries and events duplicated or late meanwhile."""

    async def inject_with_noise(r: Round) -> None:
        proxy = r.sidecar.proxy

        def chance(frame: object) -> bool:
            return r.rng.random() < rate

        rules = [
            proxy.add_rule("delay", "mailrun.mail.inbound.>", direction="to_client",
                           delay_ms=r.rng.randint(50, 300), match=chance),
            proxy.add_rule("duplicate", "mailrun.mail.inbound.>", direction="to_client",
                           match=chance),
            proxy.add_rule("duplicate", "mailrun.hub.events.*", direction="to_server",
                           match=chance),
        ]  # fmt: skip
        try:
            await inject(r)
        finally:
            for rule in rules:
                proxy.remove_rule(rule)

    return inject_with_noise


async def _round(
    cluster: Cluster, fault: Fault, *, seed: int, index: int, root: Path
) -> tuple[Outcome | None, str]:
    """One round; (None, traceback) when it broke instead of reaching a verdict."""
    scratch = root / f"round-{index:04d}"
    name = f"s{index}-{fault.key.lower()}"
    try:
        out = await run_round(cluster, fault, seed=seed, scratch=scratch, name=name)
    except Exception:
        return None, traceback.format_exc()
    node = cluster.sidecars.get(out.deployment_id)
    if node is not None:
        await node.proc.stop()  # its run is done: free the machine for the next rounds
    return out, ""


async def soak(args: argparse.Namespace, root: Path) -> dict[str, Row]:
    rng = random.Random(args.seed)
    keys = args.faults or sorted(FAULTS)
    rows: dict[str, Row] = defaultdict(Row)
    index = 0
    started = time.monotonic()
    while index < args.rounds:
        cluster_dir = root / f"cluster-{index:04d}"
        async with running_cluster(cluster_dir) as cluster:
            for _ in range(min(args.rounds_per_cluster, args.rounds - index)):
                key = rng.choice(keys)
                seed = rng.randrange(2**31)
                loud = key not in QUIET and rng.random() < args.noise
                fault = FAULTS[key]
                mails = max(1, round(fault.load.mails * args.scale))
                fault = dataclasses.replace(
                    fault, load=dataclasses.replace(fault.load, mails=mails)
                )
                if loud:
                    fault = dataclasses.replace(fault, inject=noisy(fault.inject, 0.05))
                out, error = await _round(cluster, fault, seed=seed, index=index, root=cluster_dir)
                index += 1
                elapsed = time.monotonic() - started
                if out is None:
                    rows[key].rounds += 1
                    rows[key].failed += 1
                    print(f"[{index}/{args.rounds} {elapsed:6.0f}s] {key} seed {seed} BROKE:\n"
                          f"{error}", file=sys.stderr, flush=True)  # fmt: skip
                    break  # a fresh cluster for the next round
                rows[key].add(out, loud)
                mark = "" if out.ok else "  <-- FAILED"
                print(f"[{index}/{args.rounds} {elapsed:6.0f}s] seed {seed}"
                      f"{' +noise' if loud else ''}: {out.summary()}{mark}",
                      file=sys.stderr, flush=True)  # fmt: skip
                if not out.ok:
                    _keep(out, cluster_dir / f"round-{index - 1:04d}")
    return rows


def _keep(out: Outcome, scratch: Path) -> None:
    """What a failed round's checker saw, beside the cluster's logs."""
    scratch.mkdir(parents=True, exist_ok=True)
    out.history.dump(scratch / "history.jsonl")
    (scratch / "verdict.txt").write_text(f"{out.summary()}\n{out.result!r}\n")


def table(rows: dict[str, Row]) -> str:
    head = ("fault", "rounds", "noisy", "triggers", "accepted", "lost", "duplicated",
            "reordered", "refused", "failed", "max recovery (s)")  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    total = Row()
    for key in sorted(rows, key=_order):
        row = rows[key]
        lines.append(_line(key, row))
        for f in dataclasses.fields(Row):
            value = getattr(row, f.name)
            setattr(total, f.name, getattr(total, f.name) + value)
    lines.append(_line("all", total))
    return "\n".join(lines)


def _order(key: str) -> tuple[int, str]:
    number, _, rest = key[1:].partition("-")
    return int(number), rest


def _line(key: str, row: Row) -> str:
    worst = f"{max(row.recoveries):.2f}" if row.recoveries else "-"
    cells = (key, row.rounds, row.noisy, row.triggers, row.accepted, row.lost, row.duplicated,
             row.reordered, row.refused, row.failed, worst)  # fmt: skip
    return "| " + " | ".join(str(c) for c in cells) + " |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.faults.soak", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds-per-cluster", type=int, default=10)
    parser.add_argument("--scale", type=float, default=1.5,
                        help="mails per client, relative to the matrix's rounds")  # fmt: skip
    parser.add_argument("--noise", type=float, default=0.3,
                        help="share of rounds with duplicated and late frames on top")  # fmt: skip
    parser.add_argument("--faults", type=lambda s: s.split(","), default=None,
                        help=f"comma-separated subset of {','.join(FAULTS)}")  # fmt: skip
    parser.add_argument("--dir", type=Path, default=None,
                        help="keep the clusters' logs here (default: a temp dir,"
                             " removed when every round passed)")  # fmt: skip
    args = parser.parse_args(argv)
    unknown = set(args.faults or ()) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults: {', '.join(sorted(unknown))}")
    root = args.dir or Path(tempfile.mkdtemp(prefix="mailrun-soak-"))
    started = time.monotonic()
    rows = anyio.run(soak, args, root)
    print(f"{args.rounds} rounds, seed {args.seed}, {time.monotonic() - started:.0f} s\n")
    print(table(rows))
    bad = any(r.lost or r.duplicated or r.reordered or r.failed for r in rows.values())
    if bad:
        print(f"\nFAILED: logs and histories under {root}", file=sys.stderr)
        raise SystemExit(1)
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
