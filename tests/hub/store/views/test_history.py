"""A run's recorded history as replay reads it (hub/store/history.py), from
events a scripted sidecar sends through the hub's real ingestion: effects
go with the item after them and an end with the item before it; the start
is the beginning while RunStarted is held, else the oldest item held; an
item whose body is gone is kept without one; a refused item stops it. A
step's record goes with the dispatch it names, wherever it was ingested."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import msgspec
import pytest

from hub._errors import UnknownRun
from hub.store import RunHistory, read_history
from hub.wire import RetentionConfig, WireConfig
from runtime import (
    ApprovalRequested,
    DispatchOutcome,
    DispatchProcessed,
    Event,
    EventsAck,
    MailSent,
    RunCompleted,
    RunStarted,
    new_id,
)
from runtime.wire import (
    INLINE_BODY_LIMIT,
    MailContext,
    StepRecorded,
    TimerCancelled,
    TimerSet,
)
from tests.support.harnesses.wire import Hub, Sidecar, accept, owned, running_hub, send
from tests.support.store import execute

pytestmark = pytest.mark.anyio


def processed(
    run_id: str, dispatch_id: str, seq: int, step: int, outcome: str = DispatchOutcome.PROCESSED
) -> DispatchProcessed:
    """The item's event, its state ``{"step": step}``."""
    return DispatchProcessed(
        event_id=new_id("evt"),
        run_id=run_id,
        dispatch_id=dispatch_id,
        seq=seq,
        step=step,
        state={"step": step},
        outcome=outcome,
    )


def mail(run_id: str, subject: str) -> MailSent:
    return MailSent(event_id=new_id("evt"), run_id=run_id, to="ops@example.org", subject=subject)


async def ship(car: Sidecar, *events: Event) -> None:
    assert isinstance(await send(car, *events), EventsAck)


async def history_of(hub: Hub, run_id: str) -> RunHistory:
    return await hub.store.read(partial(read_history, run_id=run_id))


async def test_effects_go_with_the_next_item_and_an_end_with_the_one_before(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1, r2, r3) = await owned(hub, 3)
        run = r1.run_id
        started = RunStarted(event_id=new_id("evt"), run_id=run)
        await ship(car, started, processed(run, r1.dispatch_id, 1, 1))
        first_take = processed(run, r2.dispatch_id, 2, 2)
        await ship(car, mail(run, "first"), first_take)
        # The same item processed again (a new owner): the first one counts.
        await ship(car, mail(run, "again"), processed(run, r2.dispatch_id, 2, 2))
        asked = ApprovalRequested(
            event_id=new_id("evt"), run_id=run, approval_id="apr_1", prompt="ok?"
        )
        done = RunCompleted(event_id=new_id("evt"), run_id=run, result={"n": 3})
        await ship(car, asked, mail(run, "third"), processed(run, r3.dispatch_id, 3, 3), done)

        history = await history_of(hub, run)
        assert (history.start, history.start_state, history.skipped) == ("beginning", {}, [])
        assert history.deployment_id == car.dep.id and history.entrypoint == "flow:main"
        assert [i.dispatch_id for i in history.items] == [r.dispatch_id for r in (r1, r2, r3)]
        assert [i.body for i in history.items] == [b"m0", b"m1", b"m2"]
        assert [(i.kind, i.subject, i.sender, i.seq, i.step) for i in history.items] == [
            ("mail", f"m{n}", "a@b.c", n + 1, n + 1) for n in range(3)
        ]
        effects = [
            [(e.kind, e.subject, e.prompt) for e in i.recorded.effects] for i in history.items
        ]
        assert effects == [
            [],
            [("mail", "first", "")],
            [("approval", "", "ok?"), ("mail", "third", "")],
        ]
        assert [i.recorded.state for i in history.items] == [{"step": n} for n in (1, 2, 3)]
        ends = [i.recorded.end for i in history.items]
        assert ends[:2] == [None, None]
        assert ends[2] is not None and (ends[2].kind, ends[2].result) == ("completed", {"n": 3})
        assert history.replayable == 3


async def test_items_come_in_the_order_the_run_processed_them(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1, r2, r3) = await owned(hub, 3)
        run = r1.run_id
        # An approval decision (seq 3) overtook the item its gate held (seq 2),
        # and the hub ingested the held one's event first.
        await ship(car, RunStarted(event_id=new_id("evt"), run_id=run))
        await ship(car, processed(run, r1.dispatch_id, 1, 1), processed(run, r2.dispatch_id, 2, 3))
        await ship(car, processed(run, r3.dispatch_id, 3, 2))
        history = await history_of(hub, run)
        assert [i.seq for i in history.items] == [1, 3, 2]
        assert [i.step for i in history.items] == [1, 2, 3]


async def test_a_trimmed_history_starts_from_the_oldest_item_it_holds(tmp_path: Path) -> None:
    config = WireConfig(retention=RetentionConfig(run_history=3))
    async with running_hub(tmp_path, config=config) as hub:
        car, receipts = await owned(hub, 4)
        run = receipts[0].run_id
        await ship(car, RunStarted(event_id=new_id("evt"), run_id=run))
        for step, r in enumerate(receipts, start=1):
            await ship(car, mail(run, f"e{step}"), processed(run, r.dispatch_id, step, step))
        # Held whole: DispatchProcessed 3, MailSent e4, DispatchProcessed 4.
        history = await history_of(hub, run)
        assert (history.start, history.start_state) == ("after step 3", {"step": 3})
        assert [i.step for i in history.items] == [4]
        assert [e.subject for e in history.items[0].recorded.effects] == ["e4"]
        assert history.items[0].body == b"m3"
        assert "their events are no longer held" in history.skipped[0]
        # The bodies of the items that left the history went with their events.
        rows = await hub.all("SELECT seq, body FROM workflow_run_dispatch ORDER BY seq")
        assert [(r["seq"], r["body"]) for r in rows] == [
            (1, None),
            (2, None),
            (3, b"m2"),
            (4, b"m3"),
        ]


async def test_an_item_whose_body_was_claim_checked_is_held_without_it(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        run = r1.run_id
        (big,) = await accept(hub, car.dep, [b"x" * (INLINE_BODY_LIMIT + 1)])
        (r3,) = await accept(hub, car.dep, [b""])
        await ship(car, RunStarted(event_id=new_id("evt"), run_id=run))
        await ship(car, processed(run, r1.dispatch_id, 1, 1), processed(run, big.dispatch_id, 2, 2))
        await ship(car, processed(run, r3.dispatch_id, 3, 3))
        history = await history_of(hub, run)
        assert [i.body for i in history.items] == [b"m0", None, b""]
        assert history.replayable == 2
        assert len(history.skipped) == 1 and "claim-checked" in history.skipped[0]


async def test_a_refused_item_ends_the_history(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1, r2) = await owned(hub, 2)
        run = r1.run_id
        refused = processed(run, r2.dispatch_id, 2, 2, outcome=DispatchOutcome.REFUSED_TERMINAL)
        await ship(
            car,
            RunStarted(event_id=new_id("evt"), run_id=run),
            processed(run, r1.dispatch_id, 1, 1),
            RunCompleted(event_id=new_id("evt"), run_id=run),
            refused,
        )
        history = await history_of(hub, run)
        assert [i.step for i in history.items] == [1]
        assert "the run had ended" in history.skipped[0]


async def test_no_history_of_an_unknown_run_or_a_deployment(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        for key in ("run_nope", car.dep.id):  # an anchor row is no run
            with pytest.raises(UnknownRun):
                await history_of(hub, key)
        # A run that processed nothing yet has nothing to replay.
        history = await history_of(hub, r1.run_id)
        assert history.items == [] and history.replayable == 0


async def test_the_entrypoint_is_a_child_runs_own_else_the_active_versions(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        assert (await history_of(hub, r1.run_id)).entrypoint == "flow:main"
        await execute(
            hub.store,
            "INSERT INTO deployment_version (deployment_id, version, digest, size,"
            " entrypoint, status, created_at) SELECT deployment_id, 2, digest, size,"
            " 'flow:second', status, created_at FROM deployment_version"
            " WHERE deployment_id = ?",
            car.dep.id,
        )
        await execute(hub.store, "UPDATE deployment SET version = 2 WHERE id = ?", car.dep.id)
        assert (await history_of(hub, r1.run_id)).entrypoint == "flow:second"
        await execute(
            hub.store, "UPDATE workflow_run SET entrypoint = 'flow:child' WHERE id = ?", r1.run_id
        )
        assert (await history_of(hub, r1.run_id)).entrypoint == "flow:child"


def step(run_id: str, dispatch_id: str, name: str, index: int, result: object) -> StepRecorded:
    return StepRecorded(
        event_id=new_id("evt"),
        run_id=run_id,
        dispatch_id=dispatch_id,
        name=name,
        index=index,
        result=result,
    )


async def test_steps_go_with_their_dispatch_and_timers_are_effects(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1, r2, r3) = await owned(hub, 3)
        run, d1, d2 = r1.run_id, r1.dispatch_id, r2.dispatch_id
        await ship(car, RunStarted(event_id=new_id("evt"), run_id=run))
        # Recorded as each step returned, before the item committed; they
        # come in index order, whatever order they were ingested in.
        await ship(
            car, step(run, d1, "ship", 2, "shipped"), step(run, d1, "charge", 1, {"id": "ch_1"})
        )
        timer = TimerSet(
            event_id=new_id("evt"), run_id=run, name="remind", due_at=2e9, payload={"n": 1}
        )
        await ship(car, timer, processed(run, d1, 1, 1))
        # A new owner that had not seen the first record took the step again.
        await ship(car, step(run, d2, "charge", 1, "first"), step(run, d2, "charge", 1, "again"))
        asked = ApprovalRequested(
            event_id=new_id("evt"), run_id=run, approval_id="apr_1", prompt="ok?", expires_at=3e9
        )
        cancelled = TimerCancelled(event_id=new_id("evt"), run_id=run, name="remind")
        await ship(car, cancelled, asked, processed(run, d2, 2, 2))
        await ship(car, processed(run, r3.dispatch_id, 3, 3))

        history = await history_of(hub, run)
        steps = [[(s.name, s.index, s.result) for s in i.steps] for i in history.items]
        assert steps == [
            [("charge", 1, {"id": "ch_1"}), ("ship", 2, "shipped")],
            [("charge", 1, "first")],
            [],
        ]
        assert all(s.dispatch_id == i.dispatch_id for i in history.items for s in i.steps)
        effects = [
            [(e.kind, e.name, e.payload, e.due_at, e.prompt, e.expires) for e in i.recorded.effects]
            for i in history.items
        ]
        assert effects == [
            [("timer", "remind", {"n": 1}, 2e9, "", False)],
            [
                ("timer_cancel", "remind", None, None, "", False),
                ("approval", "", None, None, "ok?", True),
            ],
            [],
        ]


async def test_an_item_has_the_mail_s_context_and_the_history_its_deployment_s_address(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1, r2) = await owned(hub, 2)
        run = r1.run_id
        context = MailContext(to="flow+vip@mailrun.local", tag="vip")
        await execute(
            hub.store,
            "UPDATE workflow_run_dispatch SET context = ? WHERE id = ?",
            msgspec.msgpack.encode(context),
            r1.dispatch_id,
        )
        rich = MailSent(
            event_id=new_id("evt"),
            run_id=run,
            to="ops@example.org",
            html="<p>hi</p>",
            cc=["desk@example.org"],
        )
        started = RunStarted(event_id=new_id("evt"), run_id=run)
        await ship(car, started, processed(run, r1.dispatch_id, 1, 1))
        await ship(car, rich, processed(run, r2.dispatch_id, 2, 2))
        history = await history_of(hub, run)
    assert history.address == car.dep.address
    first, second = history.items
    assert (first.context, second.context) == (context, None)
    (effect,) = second.recorded.effects
    assert effect.rich["cc"] == ["desk@example.org"]
    assert effect.rich["html"].startswith("sha256:")
