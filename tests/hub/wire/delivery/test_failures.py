"""Failure policies on the wire: the policy in every Welcome and a change sent
as SetPolicy until PolicySet (over a real nats-server); a RunSuspended
applied once, from the owner only, never to an ended run; a parked or
failed item settled with its error, a parked one keeping its body; a
suspended run's items not overdue, its ``resume`` item overdue."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from hub.store import (
    PolicyChange,
    add_version,
    collect_blobs,
    find_overdue,
    resume_run,
    set_policy,
)
from hub.wire import WireConfig
from runtime import (
    Ack,
    AckResult,
    EventsAck,
    FrameDecoder,
    Pong,
    RunCompleted,
    Sources,
    Welcome,
    encode,
    new_id,
    open_nats,
)
from runtime.wire import (
    INLINE_BODY_LIMIT,
    FailurePolicy,
    PolicySet,
    RunSuspended,
    SetPolicy,
)
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.wire import (
    Hub,
    Sidecar,
    accept,
    deploy,
    owned,
    processed,
    running_hub,
    send,
    served,
)
from tests.support.store import statement

pytestmark = pytest.mark.anyio


async def run_row(hub: Hub, run_id: str) -> Any:
    return await hub.one(
        "SELECT status, suspended_at, failing_dispatch_id, error FROM workflow_run WHERE id = ?",
        run_id,
    )


def suspension(run_id: str, dispatch_id: str, error: str = "RuntimeError: boom") -> RunSuspended:
    return RunSuspended(
        event_id=new_id("evt"), run_id=run_id, dispatch_id=dispatch_id, attempts=5, error=error,
        at=time.time(),
    )  # fmt: skip


async def test_every_welcome_carries_the_deployments_policy(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        first = await Sidecar(hub, dep).hello()
        assert isinstance(first, Welcome) and first.policy == FailurePolicy()
        change = PolicyChange(on_failure="park", max_attempts=2, handler_timeout=1.5)
        await hub.store.transact(partial(set_policy, deployment_id=dep.id, change=change))
        again = await Sidecar(hub, dep).hello(takeover=True)
        assert isinstance(again, Welcome)
        assert again.policy == FailurePolicy(
            on_failure="park", max_attempts=2, max_backoff=60.0, handler_timeout=1.5
        )


async def test_a_changed_policy_is_sent_until_the_sidecar_answers(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    # The first SetPolicy goes unanswered: the driver waits out its timeout,
    # short here, then asks again at its next round.
    config = WireConfig(policy_timeout=0.2)
    async with (
        open_nats(nats_server.url, name="hub") as hub_bus,
        open_nats(nats_server.url, name="sidecar") as car_bus,
        running_hub(tmp_path, transport=hub_bus, config=config) as hub,
        anyio.create_task_group() as tg,
    ):
        dep = await deploy(hub.store)
        car = Sidecar(hub, dep, transport=car_bus)
        assert isinstance(await car.hello(), Welcome)
        got: list[SetPolicy] = []
        decoder: FrameDecoder[Any] = FrameDecoder()

        async def sidecar(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
            sub = await car_bus.subscribe(hub.subjects.inbound(dep.id))
            task_status.started()
            async for message in sub:
                frame = decoder.decode(message.data)
                if not isinstance(frame, SetPolicy):
                    continue  # health probes
                got.append(frame)
                if len(got) >= 2:  # the first one is lost: the hub asks again
                    await message.respond(encode(PolicySet(deployment_id=dep.id)))

        await tg.start(sidecar)
        change = PolicyChange(on_failure="fail", max_backoff=2.0)
        await hub.store.transact(partial(set_policy, deployment_id=dep.id, change=change))
        hub.wire.on_policy(dep.id)
        await wait_for(lambda: hub.wire.policy_owed(dep.id) is None, what="PolicySet")
        assert len(got) == 2
        assert {f.session_id for f in got} == {car.session[0]}
        assert got[-1].policy == FailurePolicy(on_failure="fail", max_backoff=2.0)
        tg.cancel_scope.cancel()


async def test_a_change_is_not_sent_to_a_session_that_is_gone(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        hub.wire.on_policy(dep.id)  # no session: the next Welcome carries it
        assert hub.wire.policy_owed(dep.id) is None
        old = Sidecar(hub, dep)  # nobody answers on its inbound subject
        assert isinstance(await old.hello(), Welcome)
        hub.wire.on_policy(dep.id)
        assert hub.wire.policy_owed(dep.id) == old.session[0]
        assert isinstance(await Sidecar(hub, dep).hello(takeover=True), Welcome)
        await wait_for(
            lambda: hub.wire.policy_owed(dep.id) is None, what="the change owed to it dropped"
        )


async def test_run_suspended_is_applied_once_and_only_from_the_owner(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1, r2) = await owned(hub, 2)
        event = suspension(r1.run_id, r1.dispatch_id)
        assert isinstance(await send(car, event), EventsAck)
        row = await run_row(hub, r1.run_id)
        assert (row["status"], row["failing_dispatch_id"], row["error"]) == (
            "suspended", r1.dispatch_id, "RuntimeError: boom",
        )  # fmt: skip
        assert row["suspended_at"] == pytest.approx(event.at)
        # The failing dispatch is not consumed: it stays open.
        dsp = await hub.one("SELECT status FROM workflow_run_dispatch WHERE id = ?", r1.dispatch_id)
        assert dsp["status"] in ("reserved", "delivered")

        await hub.store.transact(partial(resume_run, run_id=r1.run_id))
        assert (await run_row(hub, r1.run_id))["status"] == "running"
        # The same event again (a resent frame) applies nothing.
        assert isinstance(await send(car, event), EventsAck)
        assert (await run_row(hub, r1.run_id))["status"] == "running"

        # A fenced sidecar's event is refused and applies nothing.
        assert isinstance(await Sidecar(hub, car.dep).hello(takeover=True), Welcome)
        reply = await send(car, suspension(r1.run_id, r2.dispatch_id))
        assert not isinstance(reply, EventsAck)
        assert (await run_row(hub, r1.run_id))["status"] == "running"


async def test_an_ended_run_is_not_suspended(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        await send(car, RunCompleted(event_id=new_id("evt"), run_id=r1.run_id))
        await send(car, suspension(r1.run_id, r1.dispatch_id))
        row = await run_row(hub, r1.run_id)
        assert (row["status"], row["failing_dispatch_id"]) == ("completed", None)


async def test_parked_and_failed_items_are_settled_with_their_error(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (small,) = await owned(hub, 1)
        (big, failing) = await accept(hub, car.dep, [b"x" * (INLINE_BODY_LIMIT + 1), b"f"])
        reply = await send(
            car,
            processed(small, outcome="parked", error="ValueError: a", step=1),
            processed(big, outcome="parked", error="ValueError: b", step=2),
            processed(failing, outcome="failed", error="KeyError: c", step=3),
        )
        assert isinstance(reply, EventsAck)
        rows = await hub.all(
            "SELECT id, status, error, body IS NOT NULL AS inline, body_digest"
            " FROM workflow_run_dispatch ORDER BY seq"
        )
        assert [(r["status"], r["error"], bool(r["inline"])) for r in rows] == [
            ("parked", "ValueError: a", True),
            ("parked", "ValueError: b", False),
            ("processed", "KeyError: c", True),
        ]
        run = await hub.one("SELECT last_seq, last_step FROM workflow_run WHERE id = ?",
                            small.run_id)  # fmt: skip
        assert (run["last_seq"], run["last_step"]) == (3, 3)
        # A parked item's claim-checked body stays: a retry sends it again.
        await hub.store.transact(collect_blobs)
        blob = await hub.one("SELECT COUNT(*) AS n FROM blob WHERE digest = ?",
                             rows[1]["body_digest"])  # fmt: skip
        assert blob["n"] == 1


async def test_a_suspended_runs_items_are_never_overdue_but_its_resume_is(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1, r2) = await owned(hub, 2)
        await send(car, suspension(r1.run_id, r1.dispatch_id))
        resume_id = await hub.store.transact(partial(resume_run, run_id=r1.run_id))
        # Suspended again before the resume was processed, every item delivered long ago.
        await send(car, suspension(r1.run_id, r1.dispatch_id))
        await hub.store.transact(
            lambda tx: tx.execute(statement(_DELIVERED_LONG_AGO), ("delivered", 1.0, car.dep.id))
        )
        overdue = await hub.store.read(partial(find_overdue, window=100, before=time.time()))
        assert [o.dispatch_id for o in overdue] == [resume_id]
        del r2


_DELIVERED_LONG_AGO = (
    "UPDATE workflow_run_dispatch SET status = ?, delivered_at = ? WHERE deployment_id = ?"
)


async def test_a_version_made_active_sends_the_suspended_run_its_resume(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        car, inbox, _ = await served(hub, tg)
        dep = car.dep
        (held,) = await accept(hub, dep, [b"boom"])
        await wait_for(lambda: len(inbox.frames) == 1, what="the mail delivered")
        await send(car, suspension(held.run_id, held.dispatch_id))
        await hub.store.transact(partial(add_version, deployment_id=dep.id, sources=V2))
        hub.wire.on_rollout(dep.id)

        await wait_for(lambda: len(inbox.frames) == 2, what="the resume delivered")
        resume = inbox.frames[1]
        assert (resume.kind, resume.run_id, resume.seq, resume.version) == (
            "resume", held.run_id, 2, 2,
        )  # fmt: skip
        assert (await run_row(hub, held.run_id))["status"] == "running"
        tg.cancel_scope.cancel()


async def test_a_suspension_that_crossed_an_activation_is_resumed_at_once(
    tmp_path: Path,
) -> None:
    """The item failed under version 1, its RunSuspended arriving after
    version 2 became active (which found no suspended run to resume): the
    run resumes at once, under version 2. Failing under version 2 too, it
    stays suspended."""
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        car, inbox, _ = await served(hub, tg)
        dep = car.dep
        (held,) = await accept(hub, dep, [b"boom"])
        await wait_for(lambda: len(inbox.frames) == 1, what="the mail delivered")
        await hub.store.transact(partial(add_version, deployment_id=dep.id, sources=V2))
        hub.wire.on_rollout(dep.id)

        async def active() -> bool:
            row = await hub.one("SELECT version FROM deployment WHERE id = ?", dep.id)
            return bool(row["version"] == 2)

        # The suspension comes after the activation, which found nothing to resume.
        await wait_for(active, what="version 2 active")
        await send(car, suspension(held.run_id, held.dispatch_id))
        assert (await run_row(hub, held.run_id))["status"] == "running"
        await wait_for(lambda: len(inbox.frames) == 2, what="the resume delivered")
        resume = inbox.frames[1]
        assert (resume.kind, resume.run_id, resume.version) == ("resume", held.run_id, 2)
        stamped = await hub.one(
            "SELECT version FROM workflow_run_dispatch WHERE id = ?", held.dispatch_id
        )
        assert stamped["version"] == 2

        await send(car, suspension(held.run_id, held.dispatch_id))
        row = await run_row(hub, held.run_id)
        assert (row["status"], row["failing_dispatch_id"]) == ("suspended", held.dispatch_id)
        tg.cancel_scope.cancel()


V2 = Sources(entrypoint="flow:main", files={"flow.py": "async def main(ctx, item): pass  # 2\n"})


async def test_an_older_sidecar_that_refuses_set_policy_is_not_asked_again(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        car = Sidecar(hub, dep)
        assert isinstance(await car.hello(), Welcome)
        asked: list[SetPolicy] = []
        decoder: FrameDecoder[Any] = FrameDecoder()

        async def older(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
            sub = await car.bus.subscribe(hub.subjects.inbound(dep.id))
            task_status.started()
            async for message in sub:
                frame = decoder.decode(message.data)
                if isinstance(frame, SetPolicy):  # a frame it does not know
                    asked.append(frame)
                    refusal = Ack(dispatch_id="", result=AckResult.REFUSED, reason="decode_error")
                    await message.respond(encode(refusal))
                else:
                    await message.respond(encode(Pong()))

        await tg.start(older)
        hub.wire.on_policy(dep.id)
        await wait_for(lambda: hub.wire.policy_owed(dep.id) is None, what="the change given up")
        assert len(asked) == 1
        tg.cancel_scope.cancel()
