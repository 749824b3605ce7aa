"""Retention at the hub: a bounded history per run, bounded dead letters, and
no memory kept for a deleted deployment."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from hub._errors import UnknownSession
from hub.store import (
    Accepted,
    OwnerRow,
    Rejected,
    Trigger,
    accept_triggers,
    delete_deployment,
    get_dispatch,
)
from hub.wire import RetentionConfig, WireConfig
from hub.wire.sessions.nonces import Nonces
from runtime import DispatchProcessed, EnvelopeQuarantined, EventsAck, new_id
from tests.support.harnesses.wire import (
    Sidecar,
    accept,
    owned,
    processed,
    refused,
    running_hub,
    send,
)
from tests.support.store import execute

pytestmark = pytest.mark.anyio


def config(**retention: int | float) -> WireConfig:
    return WireConfig(retention=RetentionConfig(**retention))  # type: ignore[arg-type]


async def test_each_run_keeps_its_latest_events_whole_and_the_ids_of_the_rest(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path, config=config(run_history=3)) as hub:
        car, receipts = await owned(hub, 8)
        events = [
            processed(r, state={"seen": i, "pad": "x" * 10_000})
            for i, r in enumerate(receipts, start=1)
        ]
        for event in events:
            assert isinstance(await send(car, event), EventsAck)
        rows = await hub.all(
            "SELECT id, payload IS NOT NULL AS whole FROM run_event ORDER BY rowid"
        )
        assert [r["id"] for r in rows] == [e.event_id for e in events]
        assert [r["whole"] for r in rows] == [0] * 5 + [1] * 3
        # The oldest event again (an ack was lost): recognised by its id,
        # nothing applied, nothing added.
        assert isinstance(await send(car, events[0]), EventsAck)
        assert len(await hub.all("SELECT id FROM run_event")) == 8
        run_id = receipts[0].run_id
        run = await hub.one("SELECT state, last_seq FROM workflow_run WHERE id = ?", run_id)
        assert (json.loads(run["state"])["seen"], run["last_seq"]) == (8, receipts[-1].seq)


async def test_a_frame_longer_than_the_history_ends_as_its_events_sent_one_by_one(
    tmp_path: Path,
) -> None:
    # The frame's events before the history's last ones are recorded without
    # their payload at once: the outcome must be that of trimming afterwards.
    async with running_hub(tmp_path, config=config(run_history=3)) as hub:

        def script(receipts: list[Accepted]) -> list[DispatchProcessed]:
            events = [processed(r, state={"seen": i}, step=i) for i, r in enumerate(receipts, 1)]
            # Seq 2 reported again under a new id (its dispatch settled by
            # then), and two copies of events already recorded.
            again = processed(receipts[1], state={"seen": 2}, step=2)
            return [events[0], *events, again, events[4]]

        async def outcome(car: Sidecar) -> tuple[list[int], list[tuple[object, ...]]]:
            history = await hub.all(
                "SELECT payload IS NOT NULL AS whole FROM run_event WHERE deployment_id = ?"
                " ORDER BY rowid",
                car.dep.id,
            )
            dispatches = await hub.all(
                "SELECT status, body IS NULL AS gone, inline_digest, body_size, body_digest"
                " FROM workflow_run_dispatch WHERE deployment_id = ? ORDER BY seq",
                car.dep.id,
            )
            return [r["whole"] for r in history], [tuple(r) for r in dispatches]

        framed, framed_receipts = await owned(hub, 8, "framed")
        single, single_receipts = await owned(hub, 8, "single")
        # Seq 3 settled without an event (as a refusal cancels it): its late
        # event is trimmed as any other, and takes the body with it.
        await execute(
            hub.store,
            "UPDATE workflow_run_dispatch SET status = 'cancelled' WHERE id IN (?, ?)",
            framed_receipts[2].dispatch_id,
            single_receipts[2].dispatch_id,
        )
        first, *rest = script(framed_receipts)
        assert isinstance(await send(framed, first), EventsAck)
        assert isinstance(await send(framed, *rest), EventsAck)
        for event in script(single_receipts):
            assert isinstance(await send(single, event), EventsAck)
        whole, dispatches = await outcome(framed)
        assert (whole, dispatches) == await outcome(single)
        assert whole == [0] * 6 + [1] * 3  # seqs 7 and 8, and seq 2 again
        gone, cancelled, kept = ("processed", 1), ("cancelled", 1), ("processed", 0)
        assert [d[:2] for d in dispatches] == [gone] * 2 + [cancelled] + [gone] * 3 + [kept] * 2
        assert all(str(d[2]).startswith("sha256:") for d in dispatches if d[0] == "processed")
        # body_digest names claim checks only: an inline body's digest has its own column.
        assert {d[4] for d in dispatches} == {None}
        run = await hub.one(
            "SELECT state FROM workflow_run WHERE id = ?", framed_receipts[0].run_id
        )
        assert json.loads(run["state"]) == {"seen": 8}


async def test_an_applied_dispatch_keeps_its_body_while_its_history_does_and_its_digest_always(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path, config=config(run_history=2)) as hub:
        car, _ = await owned(hub)

        def mail(body: bytes, message_id: str = "m-1") -> Trigger:
            return Trigger(
                address=car.dep.address,
                message_id=message_id,
                sender="a@b.c",
                subject="s",
                body=body,
            )

        async def submit(body: bytes, message_id: str = "m-1") -> Accepted | Rejected:
            [outcome], _ = await hub.store.transact(
                partial(accept_triggers, triggers=[mail(body, message_id)])
            )
            return outcome

        async def process(receipt: Accepted) -> None:
            assert isinstance(await send(car, processed(receipt)), EventsAck)

        async def row(dispatch_id: str) -> dict[str, object]:
            found = await hub.one(
                "SELECT status, body, inline_digest AS digest, body_digest, body_size"
                " FROM workflow_run_dispatch WHERE id = ?",
                dispatch_id,
            )
            return dict(found)

        body = b"x" * 30_000  # inline (under the claim-check size)
        first = await submit(body)
        assert isinstance(first, Accepted)
        await process(first)
        # Within the run's history: replay can call the handler with it.
        kept = await row(first.dispatch_id)
        assert (kept["status"], kept["body"], kept["body_size"]) == ("processed", body, 30_000)
        assert str(kept["digest"]).startswith("sha256:")
        assert kept["body_digest"] is None  # the claim checks' column, and its index
        view = await hub.store.read(partial(get_dispatch, dispatch_id=first.dispatch_id))
        assert view.body_digest == kept["digest"]  # GET /dispatches/{id} shows it as before
        later: list[Accepted] = []
        for n in (2, 3):  # two more items push the first one's event out of the history
            receipt = await submit(b"later", f"m-{n}")
            assert isinstance(receipt, Accepted)
            await process(receipt)
            later.append(receipt)
        gone = await row(first.dispatch_id)
        assert (gone["body"], gone["body_size"], gone["digest"]) == (None, 30_000, kept["digest"])
        assert (await row(later[-1].dispatch_id))["body"] == b"later"
        # A retry still gets its first receipt, and other content under the id
        # is still refused: the digest and size decide.
        again = await submit(body)
        assert isinstance(again, Accepted) and again.duplicate
        assert again.dispatch_id == first.dispatch_id
        other = await submit(b"y" * 30_000)
        assert isinstance(other, Rejected) and other.reason == "message_id_reused"


async def test_a_run_is_trimmed_once_a_quarter_of_its_history_came_and_never_holds_more(
    tmp_path: Path,
) -> None:
    # A history of 8 is trimmed each second step (8 // 4): one frame an item,
    # a lone mail's, trims at even steps only and so holds 9 payloads at most.
    async with running_hub(tmp_path, config=config(run_history=8)) as hub:
        car, receipts = await owned(hub, 13)

        async def history() -> tuple[int, list[tuple[int, int]]]:
            whole = await hub.one(
                "SELECT SUM(payload IS NOT NULL) AS n FROM run_event WHERE run_id = ?",
                receipts[0].run_id,
            )
            # A processed dispatch keeps its body exactly while its event
            # keeps its payload.
            pairs = await hub.all(
                "SELECT e.payload IS NOT NULL AS event, d.body IS NOT NULL AS body"
                " FROM run_event e JOIN workflow_run_dispatch d ON d.run_id = e.run_id"
                " AND d.seq = (SELECT seq FROM workflow_run_dispatch WHERE id = ?)"
                " WHERE e.id = ?",
                receipts[0].dispatch_id,
                first_event,
            )
            return int(whole["n"]), [tuple(p) for p in pairs]

        first_event = ""
        counts: list[int] = []
        for step, receipt in enumerate(receipts[:12], start=1):
            event = processed(receipt, state={"seen": step}, step=step)
            first_event = first_event or event.event_id
            assert isinstance(await send(car, event), EventsAck)
            whole, pairs = await history()
            counts.append(whole)
            assert pairs in ([(1, 1)], [(0, 0)])
        assert counts == [1, 2, 3, 4, 5, 6, 7, 8, 9, 8, 9, 8]
        # An event its run's step does not count (an older sidecar's, without
        # one) is trimmed with its frame, whatever the step.
        assert isinstance(await send(car, processed(receipts[12])), EventsAck)
        assert (await history())[0] == 8


async def test_the_history_is_per_run(tmp_path: Path) -> None:
    async with running_hub(tmp_path, config=config(run_history=2)) as hub:
        first, (a1, a2) = await owned(hub, 2, "first")
        second, (b1, b2, b3) = await owned(hub, 3, "second")
        for car, receipt in [(first, a1), (second, b1), (second, b2), (first, a2), (second, b3)]:
            assert isinstance(await send(car, processed(receipt)), EventsAck)
        rows = await hub.all(
            "SELECT run_id, SUM(payload IS NOT NULL) AS whole, COUNT(*) AS n FROM run_event"
            " GROUP BY run_id ORDER BY n"
        )
        assert [(r["whole"], r["n"]) for r in rows] == [(2, 2), (2, 3)]


async def test_garbage_is_answered_but_kept_only_within_rate_and_caps(tmp_path: Path) -> None:
    limits = config(
        dead_letter_burst=5,
        dead_letter_rate=0.001,
        dead_letters_per_source=3,
        dead_letters=4,
        garbage_bytes=100,
    )
    async with running_hub(tmp_path, config=limits) as hub:
        car, (r1,) = await owned(hub, 1)
        # A quarantined envelope: a dispatch cancelled, never trimmed away.
        event = EnvelopeQuarantined(
            event_id=new_id("evt"), run_id="", dispatch_id=r1.dispatch_id, reason="truncated"
        )
        assert isinstance(await send(car, event), EventsAck)
        garbage = b"\xc1" + b"x" * 1000
        for _ in range(20):  # anyone on the shared subject
            assert refused(await car.request(hub.subjects.events, garbage), "decode_error")
        rows = await hub.all(
            "SELECT source, deployment_id, length(data) AS n FROM dead_letter ORDER BY id"
        )
        assert [(r["source"], r["deployment_id"]) for r in rows] == [
            ("quarantine", car.dep.id),
            ("events", None),
            ("events", None),
            ("events", None),
        ]
        assert [r["n"] for r in rows[1:]] == [100] * 3  # what is kept of each
        # Another source: its own rate, and the total cap.
        own = Sidecar(hub, car.dep, own=True)
        for _ in range(3):
            assert refused(await own.request(own.subjects.events, garbage), "decode_error")
        rows = await hub.all("SELECT source, deployment_id FROM dead_letter ORDER BY id")
        kept = [(r["source"], r["deployment_id"]) for r in rows]
        assert kept.count(("quarantine", car.dep.id)) == 1
        assert kept.count(("events", car.dep.id)) == 3
        assert len(kept) == 1 + 4  # the quarantined one is not counted in the cap
        metrics = hub.wire.metrics()
        assert 'mailrun_dead_letters_dropped_total{why="rate_limit"} 15' in metrics
        assert 'mailrun_dead_letters_dropped_total{why="cap"} 4' in metrics


async def test_a_deleted_deployment_leaves_nothing_in_memory(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, _ = await owned(hub, 0)
        await accept(hub, car.dep, [b"x"])  # a lane for it, running
        assert car.dep.id in hub.wire.dispatcher.stats()["lanes"]
        session_id, _ = car.session
        assert await delete_deployment(hub.store, car.dep.id)
        hub.wire.on_deleted(car.dep.id)
        assert car.dep.id not in hub.wire.dispatcher.stats()["lanes"]
        with pytest.raises(UnknownSession):
            hub.wire.sessions.check(session_id, car.dep.id, sender=None)


def test_expired_nonces_are_forgotten_as_new_ones_are_issued() -> None:
    nonces = Nonces(ttl=0.0)
    row = OwnerRow("key", None, None, 0, None, "running")
    issued = [nonces.issue("dep_x", row) for _ in range(50)]
    assert len(nonces._issued) == 1
    assert nonces.take(issued[-1], "dep_x") is None  # expired, as before
