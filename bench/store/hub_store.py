"""The hub's writer alone: CPU per mail of the accept and of the ingestion, as
the dispatch table grows.

    .venv/bin/python bench/store/hub_store.py [--rows 100000] [--batch 100] [--frame 70]
        [--message-ids] [--json]

Opens a real hub store (SQLite, as the hub configures it) in a temporary
dir, deploys one workflow and accepts ``--rows`` mails in transactions of
``--batch`` (``hub.store.accept_triggers``, as the Acceptor runs it), then
applies a DispatchProcessed for each, in frames of ``--frame`` (70; 1 is
a lone mail's frame), each in its transaction, the history trimmed where
``hub.wire.events`` trims it (the runs due), and counts the events left
whole. It prints the accept's CPU per
mail for each fifth of the rows (the table grows under it) and the
ingestion's. No NATS, no HTTP, no other process: what the hub's one writer
spends, without the rest of the system on the same cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests' helpers

from hub.store import Accepted, Trigger, Tx, accept_triggers, open_store, trim_history
from hub.wire.events.processed import ProcessedBatch
from runtime import DispatchProcessed, Event
from runtime.config import DEFAULT_RUN_HISTORY
from tests.support.harnesses.wire import deploy, processed
from tests.support.store import read_one

FRAME = 70  # events per frame, about what a sidecar under load sends
_WHOLE = "payload IS NOT NULL"


async def bench(
    rows: int, batch: int, frame: int, message_ids: bool, figures: dict[str, object]
) -> None:
    with tempfile.TemporaryDirectory(prefix="mailrun-store-") as tmp:
        async with await open_store(Path(tmp) / "hub.db") as store:
            dep = await deploy(store)
            receipts: list[Accepted] = []
            fifths: list[dict[str, float]] = []
            marks = [rows * k // 5 for k in range(1, 6)]  # each fifth of the rows
            began, last = time.process_time(), 0
            for at in range(0, rows, batch):
                triggers = [
                    Trigger(
                        address=dep.address,
                        sender="a@b.c",
                        subject=f"m{n}",
                        body=f"body of mail {n}".encode(),
                        message_id=f"<{n}@bench.example>" if message_ids else None,
                    )
                    for n in range(at, min(at + batch, rows))
                ]

                outcomes, _ = await store.transact(partial(accept_triggers, triggers=triggers))
                receipts += [o for o in outcomes if isinstance(o, Accepted)]
                if marks and len(receipts) >= marks[0]:
                    marks = [m for m in marks if m > len(receipts)]
                    now, done = time.process_time(), len(receipts)
                    fifths.append({"rows": done, "us": 1e6 * (now - began) / (done - last)})
                    began, last = now, done
            figures["accept_us_per_mail"] = fifths

            def dead_letter(event: Event, reason: str) -> None:
                raise RuntimeError(f"{event} dead-lettered: {reason}")

            began = time.process_time()
            for at in range(0, len(receipts), frame):
                events = [
                    processed(
                        r, state={"count": at + n}, step=at + n + 1, version=1, at=time.time()
                    )
                    for n, r in enumerate(receipts[at : at + frame])
                ]

                def ingest(tx: Tx, events: list[DispatchProcessed] = events) -> None:
                    batch_ = ProcessedBatch(
                        tx, dep.id, time.time(), dead_letter, keep=DEFAULT_RUN_HISTORY
                    )
                    batch_.apply(events)
                    trim_history(tx, batch_.due, DEFAULT_RUN_HISTORY)

                await store.transact(ingest)
            figures["ingest_us_per_mail"] = 1e6 * (time.process_time() - began) / len(receipts)
            # What the trims left whole: the run's history, and at most a
            # quarter more (hub.wire.events.processed.trim_every).
            whole = await read_one(store, f"SELECT COUNT(*) FROM run_event WHERE {_WHOLE}")
            figures["events_whole"] = int(whole[0]) if whole is not None else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100, help="mails per accept transaction")
    parser.add_argument("--frame", type=int, default=FRAME, help="events per ingested frame")
    parser.add_argument("--message-ids", action="store_true", help="each mail names a message id")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if min(args.rows, args.batch, args.frame) < 1:
        parser.error("--rows, --batch and --frame must be positive")
    figures: dict[str, object] = {"rows": args.rows, "message_ids": args.message_ids}
    figures["frame"] = args.frame
    anyio.run(bench, args.rows, args.batch, args.frame, args.message_ids, figures)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    ids = "with" if args.message_ids else "without"
    print(f"{args.rows} mails {ids} message ids, {args.batch} per accept transaction")
    for fifth in figures["accept_us_per_mail"]:  # type: ignore[attr-defined]
        print(f"accept, up to {fifth['rows']:>7} rows   {fifth['us']:6.1f} us CPU per mail")
    frames = f"ingestion, {args.frame} a frame"
    print(f"{frames:<31}{figures['ingest_us_per_mail']:6.1f} us CPU per mail")


if __name__ == "__main__":
    main()
