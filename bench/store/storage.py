"""Storage under a steady load: a real `mailrun up`, rounds of big mails, the bytes on disk.

    .venv/bin/python bench/store/storage.py [--rounds 2] [--mails 100] [--size 300000] [--json]

Starts `mailrun up` in a temporary dir, deploys a workflow that counts its
mails, then sends ``--rounds`` rounds of ``--mails`` mails of ``--size``
random bytes each (8 senders). After each round, once every mail is
processed and retention has done its part (the hub's blobs collected, every
envelope compacted at the sidecar, free pages given back), it checkpoints
both databases and prints the bytes of the hub's ``hub.db`` (WAL and shared
memory included) and of the sidecar's whole state directory, the WALs as
they were found, and the row counts behind the sizes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests' helpers

from bench.mail.bench_e2e import scratch_dir
from tests.e2e.footprint.storage import Sizes, storage


async def bench(rounds: int, mails: int, size: int, tmp: Path, out: list[Sizes]) -> None:
    async with storage(tmp) as s:
        for n in range(1, rounds + 1):
            began = time.perf_counter()
            await s.send(mails, size)
            await s.settle(timeout=600)
            sizes = s.measure()
            out.append(sizes)
            print(f"round {n} done in {time.perf_counter() - began:.1f} s", file=sys.stderr)


def mib(n: int) -> str:
    return f"{n / 2**20:7.2f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--mails", type=int, default=100, help="mails per round")
    parser.add_argument("--size", type=int, default=300_000, help="bytes per mail body")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the state dir and logs")
    args = parser.parse_args()
    if min(args.rounds, args.mails, args.size) < 1:
        parser.error("--rounds, --mails and --size must be positive")
    figures: list[Sizes] = []
    with scratch_dir("mailrun-storage-", keep=args.keep) as tmp:
        anyio.run(bench, args.rounds, args.mails, args.size, tmp, figures)
    if args.json:
        print(json.dumps([asdict(f) for f in figures], indent=2))
        return
    print(f"{args.rounds} rounds of {args.mails} mails of {args.size} bytes")
    print(f"{'mails':>6}  {'hub':>11}  {'sidecar':>11}  {'hub WAL':>11}  {'sidecar WAL':>11}  rows")
    for f in figures:
        rows = ", ".join(f"{k} {v}" for k, v in f.rows.items())
        print(
            f"{f.mails:>6}  {mib(f.hub)}  {mib(f.sidecar)}  {mib(f.hub_wal)}"
            f"  {mib(f.sidecar_wal)}  {rows}"
        )


if __name__ == "__main__":
    main()
