"""The statements a mail goes through search an index; none reads a table
that grows with mail from end to end.

Dispatch rows and run events are kept for good (docs/hub.md, "Retention"),
so a statement of the accept or the ingestion that scans them costs more
with every mail the hub ever took: the flow runs on a real store with a
trace of every statement, and each is checked with EXPLAIN QUERY PLAN.
"""

from __future__ import annotations

import re
import sqlite3
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from hub.store import (
    Accepted,
    Fence,
    SqliteStore,
    Trigger,
    Tx,
    accept_triggers,
    count_by_status,
    count_reserved,
    deployments_to_wake,
    find_overdue,
    floor_seq,
    load_reserved,
    record_answers,
    trim_changes,
    trim_history,
)
from hub.store.accepting.lookups import PRIOR_DISPATCHES
from hub.wire.events.processed import ProcessedBatch
from runtime import DispatchProcessed, Event, new_id
from runtime.sqlite import Database
from tests.support.harnesses.wire import deploy

pytestmark = pytest.mark.anyio

# Tables whose rows grow with the mail taken (runs too: a workflow may start
# a child run per mail): no statement of a mail's path may read one whole.
GROWING = ("workflow_run_dispatch", "workflow_run", "run_event", "change", "blob", "dead_letter")
_SCAN = re.compile(r"\bSCAN (\w+)")
_NAMED = re.compile(r"\b(?:FROM|JOIN)\s+(\w+)\s+(?:AS\s+)?(\w+)", re.IGNORECASE)
_PLANNED = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")


async def _traced(db: Database, into: list[str]) -> None:
    await db.read(lambda conn: conn.set_trace_callback(into.append))


def _scans(path: Path, statements: list[str]) -> dict[str, list[str]]:
    """Each statement that scans a growing table, with the tables it scans."""
    found: dict[str, list[str]] = {}
    with sqlite3.connect(path) as conn:
        for sql in dict.fromkeys(s.strip() for s in statements):
            if not sql.upper().startswith(_PLANNED):
                continue
            plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
            # A plan names a table by its alias (``FROM workflow_run a``).
            names = {alias: table for table, alias in _NAMED.findall(sql) if table in GROWING}
            scanned = [names.get(t, t) for t in _SCAN.findall(plan)]
            scanned = [t for t in scanned if t in GROWING]
            if scanned:
                found[sql[:200]] = scanned
    return found


async def test_a_mails_statements_search_indexes(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    async with await SqliteStore.open(path) as store:
        deps = [await deploy(store, name) for name in ("one", "two")]
        statements: list[str] = []
        await _traced(store._writer, statements)
        await _traced(store._reader, statements)

        def mails(at: int) -> list[Trigger]:
            return [
                Trigger(
                    address=d.address,
                    sender="a@b.c",
                    subject="s",
                    body=b"x",
                    message_id=f"<{at + n}@b.c>",
                )
                for n in range(20)
                for d in deps
            ]

        async def accept(triggers: list[Trigger]) -> list[Accepted]:
            outcomes, _ = await store.transact(partial(accept_triggers, triggers=triggers))
            return [o for o in outcomes if isinstance(o, Accepted)]

        receipts = await accept(mails(0))
        retried = await accept(mails(10))  # half of them retries
        assert len(receipts) == 40 and sum(r.duplicate for r in retried) == 20

        one, two = deps[0].id, deps[1].id
        assert {d: n for d, (n, _) in (await store.read(count_reserved)).items()} == {
            one: 30,
            two: 30,
        }
        rows = await store.read(partial(load_reserved, deployment_id=one, limit=64))
        assert rows is not None and len(rows) == 30
        settle = partial(
            record_answers,
            fence=Fence(one, 0),  # nobody claimed it: epoch 0
            acked=[r.id for r in rows],
            refused=[],
            now=time.time(),
        )
        await store.transact(settle)

        def dead_letter(event: Event, reason: str) -> None:
            raise AssertionError(reason)

        processed = [
            DispatchProcessed(
                event_id=new_id("evt"),
                run_id=row.run_id,
                dispatch_id=row.id,
                seq=row.seq,
                state={"n": step},
                step=step,
                version=1,
                at=time.time(),
            )
            for step, row in enumerate(rows, 1)
        ]

        def ingest(tx: Tx) -> None:
            batch = ProcessedBatch(tx, one, time.time(), dead_letter)
            batch.apply(processed)
            trim_history(tx, batch.runs_with_events, 10)

        await store.transact(ingest)
        counts = await store.read(count_by_status)
        assert counts["dispatches"]["processed"] == 30
        assert await trim_changes(store, keep=10) > 0
        assert {d: n for d, (n, _) in (await store.read(count_reserved)).items()} == {two: 30}
    with sqlite3.connect(path) as conn:
        sql = "SELECT status, count(*) FROM workflow_run_dispatch GROUP BY status"
        assert dict(conn.execute(sql)) == {"processed": 30, "reserved": 30}
    assert _scans(path, statements) == {}
    assert any("message_id IN" in s for s in statements)  # the retries' lookup was traced


async def test_the_guard_sees_a_scan(tmp_path: Path) -> None:
    """What the check above would say of the row-value lookup it replaced."""
    path = tmp_path / "hub.db"
    async with await SqliteStore.open(path):
        pass
    scanning = (
        "SELECT id FROM workflow_run_dispatch WHERE (deployment_id, message_id)"
        " IN (VALUES ('a', 'b'), ('c', 'd'))"
    )
    searching = PRIOR_DISPATCHES.sqlite.replace("?", "'[\"x\"]'")
    # And of the anchors' join left to SQLite's guess: every run read.
    guessed = (
        "SELECT d.id, a.status FROM deployment d JOIN workflow_run a"
        " ON a.id = d.id AND a.is_anchor = 1"
        " WHERE d.address IN (SELECT value FROM json_each('[\"x\"]'))"
        " ORDER BY d.deleted_at IS NULL, d.created_at, d.id"
    )
    assert _scans(path, [scanning, searching, guessed]) == {
        scanning: ["workflow_run_dispatch"],
        guessed[:200]: ["workflow_run"],
    }


async def test_a_lone_mails_statements_are_compiled_once(tmp_path: Path) -> None:
    """Mail after mail, the statements of a lone mail's path run as SQLite
    compiled them the first time. A value bound where the table has a partial
    index on a constant (``dispatch_parked``: status = 'parked') made SQLite
    compile that statement again at every run, as if the schema had changed
    (the load of reserved rows 88 us instead of 8): compiling is what calls
    the authorizer. The reads the hub makes every second, whatever the mail,
    likewise."""
    async with await SqliteStore.open(tmp_path / "hub.db") as store:
        dep = await deploy(store, "lone")
        compiled: list[str] = []

        def authorizer(action: int, *names: str | None) -> int:
            # A pragma is the database's own, set when a use needs another
            # busy timeout (a transaction sent to a worker thread, under load).
            if action != sqlite3.SQLITE_PRAGMA:
                compiled.append(f"{action} {names}")
            return sqlite3.SQLITE_OK

        for db in (store._writer, store._reader):
            await db.read(lambda conn: conn.set_authorizer(authorizer))

        def dead_letter(event: Event, reason: str) -> None:
            raise AssertionError(reason)

        async def lone_mail(n: int) -> dict[str, int]:
            """One mail through the store's steps; how many compilations each cost."""
            costs: dict[str, int] = {}

            async def step(name: str, run: Any) -> Any:
                before = len(compiled)
                result = await run
                costs[name] = len(compiled) - before
                return result

            trigger = Trigger(address=dep.address, sender="a@b.c", subject=f"m{n}", body=b"x")
            await step("accept", store.transact(partial(accept_triggers, triggers=[trigger])))
            load = partial(load_reserved, deployment_id=dep.id, limit=8, after=n - 1)
            (row,) = await step("load", store.read(load))
            # The census, the redelivery sweep and the wakes' read: each once a second.
            await step("count", store.read(count_reserved))
            sweep = partial(find_overdue, window=64, before=time.time())
            await step("sweep", store.read(sweep))
            await step("wakes", store.read(deployments_to_wake))
            fence = Fence(dep.id, 0)  # nobody claimed it: epoch 0
            refuse = partial(
                record_answers, fence=fence, acked=[], refused=[(row.id, "no")], now=time.time()
            )
            await step("refuse", store.transact(refuse))
            settle = partial(
                record_answers, fence=fence, acked=[row.id], refused=[], now=time.time()
            )
            await step("settle", store.transact(settle))
            event = DispatchProcessed(
                event_id=new_id("evt"),
                run_id=row.run_id,
                dispatch_id=row.id,
                seq=row.seq,
                state={"n": n},
                step=n,
                version=1,
                at=time.time(),
            )

            def ingest(tx: Tx) -> None:
                batch = ProcessedBatch(tx, dep.id, time.time(), dead_letter)
                batch.apply([event])
                trim_history(tx, batch.runs_with_events, 2)
                floor_seq(tx, dep.id)

            await step("ingest", store.transact(ingest))
            return costs

        first = await lone_mail(1)
        assert all(first.values()), first  # the authorizer sees a compilation
        # Past the first mail, and past the history's trim (keep 2): nothing new.
        later = [await lone_mail(n) for n in range(2, 7)]
        assert later[-2:] == [dict.fromkeys(first, 0)] * 2, later
