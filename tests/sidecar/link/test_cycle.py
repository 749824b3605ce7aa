"""A delivery cycle's transactions: the hub's acknowledgement of a mail's
events is held, and rides on the inbox's next transaction (the next mail's
store) instead of being one of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import DispatchProcessed, new_id
from sidecar import InboxConflict
from sidecar.link import _shipper
from sidecar.storage import Commit, Envelope, Inbox, Outgoing, encode_run_state, outgoing
from tests.support import wait_for
from tests.support.harnesses.sidecar import deployed_sidecar, mail, make_deployment

pytestmark = pytest.mark.anyio


def transactions(statements: list[str]) -> list[list[str]]:
    """The write transactions among ``statements``, each its statements."""
    found: list[list[str]] = []
    current: list[str] | None = None
    for s in statements:
        if s.startswith("BEGIN"):
            current = []
        elif s == "COMMIT" and current is not None:
            found.append(current)
            current = None
        elif current is not None:
            current.append(s)
    return found


async def test_a_lone_mails_cycle_is_three_transactions_its_ack_riding_on_the_next_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Long enough that no acknowledgement is written alone however slow the machine.
    monkeypatch.setattr(_shipper, "MARK_WAIT", 60.0)
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, car):
        inbox = car.inbox
        assert inbox is not None
        await hub.deliver(mail(dep, 1, "one"))
        await hub.wait_events(DispatchProcessed, 1)
        await wait_for(lambda: inbox.acks_held, what="the first mail's ack held")
        first = set(hub.events)
        # Acknowledged, and still in the outbox: held, not written.
        assert {r[0] for r in dep.query("SELECT event_id FROM outbox")} == first
        seen: list[str] = []
        await inbox.db.read(lambda conn: conn.set_trace_callback(seen.append))
        try:
            await hub.deliver(mail(dep, 2, "two"))
            await hub.wait_events(DispatchProcessed, 2)
            await wait_for(lambda: inbox.acks_held, what="the second mail's ack held")
            cycle = transactions(seen)
        finally:
            await inbox.db.read(lambda conn: conn.set_trace_callback(None))
        # The store, the in-flight mark, the step's commit: no fourth for the ack.
        assert len(cycle) == 3, cycle
        store = cycle[0]
        assert any(s.startswith("INSERT OR IGNORE INTO inbox") for s in store)
        assert any(s.startswith("DELETE FROM outbox") for s in store)
        left = {r[0] for r in dep.query("SELECT event_id FROM outbox")}
        assert left and not left & first
        assert left == set(hub.events) - first  # held: written by the next transaction
    # An orderly stop writes what it held.
    assert dep.query("SELECT count(*) FROM outbox") == [(0,)]
    assert dep.query("SELECT state, length(envelope) FROM inbox ORDER BY seq") == [
        ("done", 0),
        ("done", 0),
    ]


async def test_a_held_ack_stays_held_through_a_commit_that_rolls_back(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        step, event = await processed_once(inbox, state=encode_run_state({"n": 1}))
        inbox.hold_acked([event])
        with pytest.raises(InboxConflict):
            await inbox.commit(step)  # no longer next: rolled back, the mark with it
        assert inbox.acks_held
        assert await outbox(inbox) == [event.event_id]
        # The next transaction that commits writes it.
        await inbox.store([Envelope(dispatch_id=new_id("dsp"), run_id="run_b", seq=2)])
        assert not inbox.acks_held
        assert await outbox(inbox) == []
    finally:
        await inbox.aclose()


async def test_the_inbox_is_at_rest_only_once_it_wrote_what_it_held(tmp_path: Path) -> None:
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        _, event = await processed_once(inbox)
        inbox.hold_acked([event])
        assert await outbox(inbox) == [event.event_id]
        assert await inbox.at_rest()
        assert await outbox(inbox) == []
    finally:
        await inbox.aclose()


async def processed_once(inbox: Inbox, state: bytes | None = None) -> tuple[Commit, Outgoing]:
    """Seq 1 of run_a stored and processed: the step, and its one event."""
    e1 = Envelope(dispatch_id=new_id("dsp"), run_id="run_a", seq=1)
    await inbox.store([e1])
    event = outgoing(
        DispatchProcessed(event_id=new_id("evt"), run_id="run_a", dispatch_id=e1.dispatch_id)
    )
    consumed = [(e1.dispatch_id, 1, "processed")]
    step = Commit(run_id="run_a", status="running", consumed=consumed, state=state, events=[event])
    await inbox.commit(step)
    return step, event


async def outbox(inbox: Inbox) -> list[str]:
    return await inbox.db.read(
        lambda conn: [r[0] for r in conn.execute("SELECT event_id FROM outbox ORDER BY pos")]
    )


async def test_an_ack_no_transaction_takes_is_written_alone(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, car):
        assert car.inbox is not None
        inbox = car.inbox
        await hub.deliver(mail(dep, 1, "one"))
        await hub.wait_events(DispatchProcessed, 1)
        await wait_for(lambda: inbox.acks_held, what="the ack held")
        await wait_for(
            lambda: dep.query("SELECT count(*) FROM outbox") == [(0,)], what="the ack written"
        )
        assert not inbox.acks_held
        assert dep.query("SELECT state, length(envelope) FROM inbox") == [("done", 0)]
