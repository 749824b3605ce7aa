"""The long fault run: N seeded rounds of randomly mixed faults under load.

    .venv/bin/python -m tests.faults.harness.soak --rounds 200 --seed 1

Each round picks a fault of the matrix (``scenarios.FAULTS``) and its
parameters from the seed, adds light network noise (duplicated and late
frames) to some rounds, runs it against a fresh deployment under a workload
(``rounds.run_round``, ``--scale`` times the matrix's mails per client), and
checks the history: safe (nothing lost, duplicated or reordered) and live
(every mail settled within the bound after the fault). Rounds share a cluster
(nats-server and the hub as real processes) for ``--rounds-per-cluster``
rounds, so the hub carries the state of earlier rounds and faults. Then the
long outages (``scenarios.LONG``: NATS down 20 minutes, the hub down 30),
``--long`` times each, each on a cluster of its own whose processes run
their retry delays capped at ``--time-scale`` seconds, so the outage lasts
that share of its real length (compressed time).

A round whose fault could not be injected (a state it waited for never
came, or no evidence that it happened) tested nothing: it is run again, up
to ``--inject-retries`` times, with another seed. The table keeps the two
kinds of trouble apart: ``failed`` counts rounds where the system broke a
guarantee (safety, liveness or a fault's own check), ``not injected`` and
``broke`` are harness problems (no injection after the retries; the harness
itself failed). The exit status is 1 if any round failed, 2 if there were
only harness problems; the history and the cluster's logs of such rounds are
kept under ``--dir``.
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

from runtime.config import BACKOFF_MAX_ENV

from .cluster import Cluster, running_cluster
from .outcome import Outcome
from .rounds import Fault, Inject, Round, run_round
from .scenarios import FAULTS, LONG

QUIET = frozenset({"F3", "F5"})
"""Faults that are network noise already."""


@dataclass
class Row:
    rounds: int = 0
    noisy: int = 0
    retried: int = 0
    triggers: int = 0
    accepted: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    refused: int = 0
    unsettled: int = 0
    late: int = 0
    failed: int = 0
    not_injected: int = 0
    broke: int = 0
    recoveries: list[float] = field(default_factory=list)
    settles: list[float] = field(default_factory=list)

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
        self.unsettled += len(r.unsettled)
        self.late += len(r.late)
        self.failed += not out.ok
        self.recoveries.append(out.recovery if out.recovery is not None else float("inf"))
        self.settles.append(r.settle_max)


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
    cluster: Cluster, fault: Fault, *, seed: int, name: str, root: Path
) -> tuple[Outcome | None, str]:
    """One round; (None, traceback) when it broke instead of reaching a verdict."""
    try:
        out = await run_round(cluster, fault, seed=seed, scratch=root / name, name=name)
    except Exception:
        return None, traceback.format_exc()
    node = cluster.sidecars.get(out.deployment_id)
    if node is not None:
        await node.proc.stop()  # its run is done: free the machine for the next rounds
    return out, ""


@dataclass
class Soak:
    args: argparse.Namespace
    root: Path
    total: int
    rows: dict[str, Row] = field(default_factory=lambda: defaultdict(Row))
    done: int = 0
    started: float = field(default_factory=time.monotonic)

    def say(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{self.done}/{self.total} {elapsed:6.0f}s] {text}", file=sys.stderr, flush=True)

    async def draw(
        self, cluster: Cluster, cluster_dir: Path, fault: Fault, seed: int, *, loud: bool = False
    ) -> bool:
        """One draw of ``fault``: a round, run again (another seed) while its
        fault could not be injected. False if the harness broke (the cluster
        is suspect: the caller starts a fresh one)."""
        row = self.rows[fault.key]
        self.done += 1
        for attempt in range(1 + self.args.inject_retries):
            round_seed = seed if not attempt else (seed * 1_000_003 + attempt) % 2**31
            name = f"s{self.done}-{fault.key.lower()}" + (f"-r{attempt}" if attempt else "")
            out, error = await _round(cluster, fault, seed=round_seed, name=name, root=cluster_dir)
            if out is None:
                row.rounds += 1
                row.broke += 1
                self.say(f"{fault.key} seed {round_seed} BROKE (harness):\n{error}")
                return False
            row.add(out, loud)
            self.say(f"seed {round_seed}{' +noise' if loud else ''}: {out.summary()}"
                     f"{_MARK[out.verdict]}")  # fmt: skip
            if out.verdict != "ok":
                _keep(out, cluster_dir / name)
            if out.verdict != "not injected":
                return True
            if attempt < self.args.inject_retries:
                row.retried += 1
        row.not_injected += 1
        return True

    async def mixed(self) -> None:
        """The random rounds, ``--rounds-per-cluster`` to a cluster."""
        args = self.args
        rng = random.Random(args.seed)
        keys = args.faults or sorted(FAULTS)
        index = 0
        while index < args.rounds:
            cluster_dir = self.root / f"cluster-{index:04d}"
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
                    index += 1
                    if not await self.draw(cluster, cluster_dir, fault, seed, loud=loud):
                        break  # a fresh cluster for the next round

    async def long(self) -> None:
        """Each long outage ``--long`` times, each on a cluster of its own whose
        processes cap their retry delays at ``--time-scale`` seconds."""
        args = self.args
        rng = random.Random(args.seed + 1)
        env = {BACKOFF_MAX_ENV: repr(args.time_scale)}
        for key, fault in LONG.items():
            for i in range(args.long):
                cluster_dir = self.root / f"{key.lower()}-{i}"
                async with running_cluster(cluster_dir, env=env) as cluster:
                    await self.draw(cluster, cluster_dir, fault, rng.randrange(2**31))


_MARK = {"ok": "", "failed": "  <-- FAILED", "not injected": "  <-- NOT INJECTED"}


async def soak(args: argparse.Namespace, root: Path) -> dict[str, Row]:
    run = Soak(args, root, total=args.rounds + args.long * len(LONG))
    await run.mixed()
    await run.long()
    return run.rows


def _keep(out: Outcome, scratch: Path) -> None:
    """What a failed round's checker saw, beside the cluster's logs."""
    scratch.mkdir(parents=True, exist_ok=True)
    out.history.dump(scratch / "history.jsonl")
    (scratch / "verdict.txt").write_text(f"{out.summary()}\n{out.result!r}\n")


def table(rows: dict[str, Row]) -> str:
    head = ("fault", "rounds", "noisy", "retried", "triggers", "accepted", "lost",
            "duplicated", "reordered", "refused", "unsettled", "late", "failed",
            "not injected", "broke", "max recovery (s)", "max settle (s)")  # fmt: skip
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


def _worst(values: list[float]) -> str:
    if not values:
        return "-"
    worst = max(values)
    return "never" if worst == float("inf") else f"{worst:.2f}"


def _line(key: str, row: Row) -> str:
    cells = (key, row.rounds, row.noisy, row.retried, row.triggers, row.accepted, row.lost,
             row.duplicated, row.reordered, row.refused, row.unsettled, row.late, row.failed,
             row.not_injected, row.broke, _worst(row.recoveries),
             _worst(row.settles))  # fmt: skip
    return "| " + " | ".join(str(c) for c in cells) + " |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.faults.harness.soak", description=__doc__.splitlines()[0]
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
    parser.add_argument("--inject-retries", type=int, default=2,
                        help="times a round whose fault could not be injected is run"
                             " again, with another seed")  # fmt: skip
    parser.add_argument("--long", type=int, default=1,
                        help=f"runs of each long outage ({', '.join(LONG)}); 0: none")  # fmt: skip
    parser.add_argument("--time-scale", type=float, default=0.025,
                        help=f"{BACKOFF_MAX_ENV} of the long outages' processes: the"
                             " outage lasts this share of its real length, and no"
                             " retry delay is longer (seconds); 1: real time")  # fmt: skip
    parser.add_argument("--dir", type=Path, default=None,
                        help="keep the clusters' logs here (default: a temp dir,"
                             " removed when every round passed)")  # fmt: skip
    args = parser.parse_args(argv)
    unknown = set(args.faults or ()) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults: {', '.join(sorted(unknown))}")
    if not 0 < args.time_scale <= 1:
        parser.error("--time-scale must be above 0, at most 1")
    root = args.dir or Path(tempfile.mkdtemp(prefix="mailrun-soak-"))
    started = time.monotonic()
    rows = anyio.run(soak, args, root)
    print(
        f"{args.rounds} rounds and {args.long} of each long outage"
        f" (time scale {args.time_scale:g}), seed {args.seed},"
        f" {time.monotonic() - started:.0f} s\n"
    )
    print(table(rows))
    failed = any(r.lost or r.duplicated or r.reordered or r.failed for r in rows.values())
    harness = any(r.not_injected or r.broke for r in rows.values())
    if failed:
        print(f"\nFAILED: the system broke a guarantee; logs and histories under {root}",
              file=sys.stderr)  # fmt: skip
        raise SystemExit(1)
    if harness:
        print(f"\nHARNESS PROBLEM: a fault could not be injected or the harness broke;"
              f" nothing the system did failed; logs under {root}", file=sys.stderr)  # fmt: skip
        raise SystemExit(2)
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
