"""Writes of many rows a statement (hub.store.sql's ``insert_statement``,
``update_statement``): every row lands, in order, with its own values,
across groups and a remainder, the statements take few shapes, declared
once each, and the change feed's triggers record each row as a statement a
row would."""

from __future__ import annotations

from functools import partial

import pytest

from hub import Accepted, Trigger, accept_triggers
from hub.store import create_deployment, open_store, read_changes, update_rows, update_statement
from hub.store.sql import GROUP, SIZES, groups
from tests.support.store import execute, rows

pytestmark = pytest.mark.anyio

N = 2 * GROUP + 5  # two full groups and a remainder

_SETTLE = update_statement(
    (("u_id", "TEXT"), ("u_status", "TEXT"), ("u_error", "TEXT")),
    "UPDATE workflow_run_dispatch SET status = v.u_status, last_error = v.u_error"
    " FROM v WHERE id = v.u_id AND status = ?",
)


def test_a_remainder_goes_in_halves_so_a_statement_has_few_shapes() -> None:
    assert [len(g) for g in groups(list(range(N)))] == [32, 32, 4, 1]
    assert [len(g) for g in groups(list(range(31)))] == [16, 8, 4, 2, 1]
    shapes = {len(g) for n in range(1, 300) for g in groups(list(range(n)))}
    assert shapes == set(SIZES)
    rows_ = list(range(1000))
    assert [r for g in groups(rows_) for r in g] == rows_


def test_each_shape_is_declared_once_for_both_databases() -> None:
    # The rows' values first, then the statement's own; PostgreSQL's typed.
    two = _SETTLE[2]
    assert two.sqlite.startswith("WITH v(u_id, u_status, u_error) AS (VALUES (?, ?, ?), (?, ?, ?))")
    assert two.postgres.startswith(
        "WITH v(u_id, u_status, u_error) AS (VALUES (CAST($1 AS TEXT), CAST($2 AS TEXT),"
        " CAST($3 AS TEXT)), (CAST($4 AS TEXT)"
    )
    assert two.postgres.endswith("status = $7")
    assert {s.sqlite.count("(?, ?, ?)") for s in (_SETTLE[n] for n in SIZES)} == set(SIZES)


async def test_rows_across_groups_keep_their_order_and_values(database: str) -> None:
    async with await open_store(database) as store:
        await create_deployment(
            store, name="orders", source="async def main(ctx, item): pass\n",
            domain="mailrun.local", nats_url="nats://127.0.0.1:4222", subject_prefix="mailrun",
        )  # fmt: skip
        triggers = [
            Trigger(address="orders@mailrun.local", subject=f"s{i}", sender="a@b.c", body=b"x")
            for i in range(N)
        ]
        outcomes, _ = await store.transact(partial(accept_triggers, triggers=triggers))
        receipts = [o for o in outcomes if isinstance(o, Accepted)]
        assert [r.seq for r in receipts] == list(range(1, N + 1))
        stored = await rows(
            store, "SELECT id, seq, subject FROM workflow_run_dispatch ORDER BY seq"
        )
        assert stored == [(r.dispatch_id, r.seq, f"s{r.seq - 1}") for r in receipts]

        # Each row its own values; one row is no longer open and stays as it is.
        closed = receipts[GROUP].dispatch_id
        mark = (await store.read(partial(read_changes, after=0, limit=1000)))[-1].id
        await execute(
            store, "UPDATE workflow_run_dispatch SET status = 'cancelled' WHERE id = ?", closed
        )
        settled = [(r.dispatch_id, "processed", f"e{r.seq}") for r in receipts]
        await store.transact(
            partial(update_rows, statement=_SETTLE, rows=settled, params=("reserved",))
        )
        got = {
            r[0]: (r[1], r[2])
            for r in await rows(store, "SELECT id, status, last_error FROM workflow_run_dispatch")
        }
        assert got == {
            r.dispatch_id: ("cancelled", None)
            if r.dispatch_id == closed
            else ("processed", f"e{r.seq}")
            for r in receipts
        }
        changes = await store.read(partial(read_changes, after=0, limit=1000))
        assert sorted(c.row_id for c in changes if c.status == "reserved") == sorted(
            r.dispatch_id for r in receipts
        )
        assert sorted((c.row_id, c.status) for c in changes if c.id > mark) == sorted(
            (r.dispatch_id, "cancelled" if r.dispatch_id == closed else "processed")
            for r in receipts
        )
