"""Writes of many rows a statement (hub.store.bulk): every row lands, in
order, with its own values, across groups and a remainder, the statements
take few shapes, and the change feed's triggers record each row as a
statement a row would."""

from __future__ import annotations

import pytest

from hub import Accepted, Trigger, accept_triggers
from hub.store import create_deployment, open_store, read_changes, update_rows
from hub.store.bulk import GROUP, _groups

pytestmark = pytest.mark.anyio

N = 2 * GROUP + 5  # two full groups and a remainder


def test_a_remainder_goes_in_halves_so_a_statement_has_few_shapes() -> None:
    assert [len(g) for g in _groups(list(range(N)))] == [32, 32, 4, 1]
    assert [len(g) for g in _groups(list(range(31)))] == [16, 8, 4, 2, 1]
    shapes = {len(g) for n in range(1, 300) for g in _groups(list(range(n)))}
    assert shapes == {1, 2, 4, 8, 16, 32}
    rows = list(range(1000))
    assert [r for g in _groups(rows) for r in g] == rows


async def test_rows_across_groups_keep_their_order_and_values(database: str) -> None:
    # PostgreSQL updates a row a statement (bulk.update_rows): the same outcome.
    async with await open_store(database) as store:
        await create_deployment(
            store, name="orders", source="async def main(ctx, item): pass\n",
            domain="mailrun.local", nats_url="nats://127.0.0.1:4222", subject_prefix="mailrun",
        )  # fmt: skip
        triggers = [
            Trigger(address="orders@mailrun.local", subject=f"s{i}", sender="a@b.c", body=b"x")
            for i in range(N)
        ]
        async with store.write() as db:
            outcomes, _ = await accept_triggers(db, triggers)
        receipts = [o for o in outcomes if isinstance(o, Accepted)]
        assert [r.seq for r in receipts] == list(range(1, N + 1))
        rows = await store.db.execute_fetchall(
            "SELECT id, seq, subject FROM workflow_run_dispatch ORDER BY seq"
        )
        assert [tuple(r) for r in rows] == [
            (r.dispatch_id, r.seq, f"s{r.seq - 1}") for r in receipts
        ]

        # Each row its own values; one row is no longer open and stays as it is.
        closed = receipts[GROUP].dispatch_id
        mark = (await read_changes(store.db, 0, 1000))[-1].id
        async with store.write() as db:
            await db.execute(
                "UPDATE workflow_run_dispatch SET status = 'cancelled' WHERE id = ?", (closed,)
            )
            await update_rows(
                db,
                "UPDATE workflow_run_dispatch SET status = {u_status}, last_error = {u_error}"
                " WHERE id = {u_id} AND status = ?",
                ("u_id", "u_status", "u_error"),
                [(r.dispatch_id, "processed", f"e{r.seq}") for r in receipts],
                ("reserved",),
            )
        got = {
            r[0]: (r[1], r[2])
            for r in await store.db.execute_fetchall(
                "SELECT id, status, last_error FROM workflow_run_dispatch"
            )
        }
        assert got == {
            r.dispatch_id: ("cancelled", None)
            if r.dispatch_id == closed
            else ("processed", f"e{r.seq}")
            for r in receipts
        }
        changes = await read_changes(store.db, 0, 1000)
        assert sorted(c.row_id for c in changes if c.status == "reserved") == sorted(
            r.dispatch_id for r in receipts
        )
        assert sorted((c.row_id, c.status) for c in changes if c.id > mark) == sorted(
            (r.dispatch_id, "cancelled" if r.dispatch_id == closed else "processed")
            for r in receipts
        )
