"""Run event ingestion and child minting: idempotent, ordered, conditional."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from hub.store import (
    Accepted,
    Rejected,
    Trigger,
    accept_triggers,
    cancel_run,
    delete_deployment,
)
from runtime import (
    ApprovalRequested,
    ChildRunStarted,
    DispatchProcessed,
    EventsAck,
    FrameDecoder,
    MailSent,
    MintChild,
    Minted,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    new_id,
)
from tests.support.harnesses.wire import (
    Hub,
    Sidecar,
    accept,
    deploy,
    owned,
    refused,
    running_hub,
    send,
)


def processed(receipt: Accepted, step: int = 0, **state: object) -> DispatchProcessed:
    return DispatchProcessed(
        event_id=new_id("evt"),
        run_id=receipt.run_id,
        dispatch_id=receipt.dispatch_id,
        seq=receipt.seq,
        state=dict(state),
        step=step,
    )


async def run_row(hub: Hub, run_id: str) -> dict[str, object]:
    row = await hub.one("SELECT * FROM workflow_run WHERE id = ?", run_id)
    return dict(row)


@pytest.mark.anyio
async def test_a_resent_frame_is_acked_again_and_applied_once(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1, r2) = await owned(hub, 2)
        first = [RunStarted(event_id=new_id("evt"), run_id=r1.run_id), processed(r1, seen=1)]
        ack = await send(car, *first)
        assert isinstance(ack, EventsAck) and ack.ids == [e.event_id for e in first]
        assert ack.floor_seq == r1.seq  # r2 is still open
        run = await run_row(hub, r1.run_id)
        assert (run["status"], run["last_seq"], json.loads(str(run["state"]))) == (
            "running",
            r1.seq,
            {"seen": 1},
        )
        second = await send(car, processed(r2, seen=2))
        assert isinstance(second, EventsAck) and second.floor_seq == r2.seq
        # The first frame again (a sidecar resending after a lost ack).
        again = await send(car, *first)
        assert isinstance(again, EventsAck) and again.ids == ack.ids
        run = await run_row(hub, r1.run_id)
        assert (run["last_seq"], json.loads(str(run["state"]))) == (r2.seq, {"seen": 2})
        rows = await hub.all("SELECT id, status FROM workflow_run_dispatch ORDER BY seq")
        assert [r["status"] for r in rows] == ["processed", "processed"]
        count = await hub.one("SELECT COUNT(*) AS n FROM run_event")
        assert count["n"] == 3


@pytest.mark.anyio
async def test_an_older_seq_never_moves_the_state_back(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1, r2) = await owned(hub, 2)
        assert isinstance(await send(car, processed(r2, seen=2)), EventsAck)
        # A new event id for seq 1 arriving after seq 2 was applied.
        assert isinstance(await send(car, processed(r1, seen=1)), EventsAck)
        run = await run_row(hub, r1.run_id)
        assert (run["last_seq"], json.loads(str(run["state"]))) == (r2.seq, {"seen": 2})


@pytest.mark.anyio
async def test_terminal_status_is_set_once(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        done = RunCompleted(event_id=new_id("evt"), run_id=r1.run_id, result={"seen": 1})
        late = RunFailed(event_id=new_id("evt"), run_id=r1.run_id, error="boom")
        assert isinstance(await send(car, processed(r1, seen=1), done), EventsAck)
        assert isinstance(await send(car, late), EventsAck)
        run = await run_row(hub, r1.run_id)
        assert run["status"] == "completed"
        assert json.loads(str(run["result"])) == {"seen": 1} and run["error"] is None


@pytest.mark.anyio
async def test_refused_terminal_cancels_the_dispatch(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1, r2) = await owned(hub, 2)
        done = RunCompleted(event_id=new_id("evt"), run_id=r1.run_id)
        late = processed(r2)
        late.outcome = "refused_terminal"
        assert isinstance(await send(car, processed(r1, seen=1), done, late), EventsAck)
        row = await hub.one(
            "SELECT status, last_error FROM workflow_run_dispatch WHERE id = ?", r2.dispatch_id
        )
        assert (row["status"], row["last_error"]) == ("cancelled", "workflow_run_terminal")
        run = await run_row(hub, r1.run_id)
        assert json.loads(str(run["state"])) == {"seen": 1}


@pytest.mark.anyio
async def test_approval_requested_records_an_approval(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        approval_id = new_id("apr")
        event = ApprovalRequested(
            event_id=new_id("evt"), run_id=r1.run_id, approval_id=approval_id, prompt="ok?"
        )
        assert isinstance(await send(car, event), EventsAck)
        row = await hub.one("SELECT run_id, prompt, status FROM approval WHERE id = ?", approval_id)
        assert (row["run_id"], row["prompt"], row["status"]) == (r1.run_id, "ok?", "pending")


@pytest.mark.anyio
async def test_a_gate_makes_the_run_wait_its_decision_resumes_it_and_steps_order_states(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        approval_id = new_id("apr")
        asked = ApprovalRequested(event_id=new_id("evt"), run_id=r1.run_id, approval_id=approval_id)
        assert isinstance(await send(car, asked, processed(r1, step=1, seen=1)), EventsAck)
        assert (await run_row(hub, r1.run_id))["status"] == "waiting"
        (held,) = await accept(hub, car.dep, [b"held"])
        (decision,), _ = await hub.store.transact(
            partial(
                accept_triggers,
                triggers=[Trigger(kind="approval", approval_id=approval_id, decision="approve")],
            )
        )
        assert isinstance(decision, Accepted) and decision.seq > held.seq
        # Still waiting until the decision is processed.
        assert (await run_row(hub, r1.run_id))["status"] == "waiting"
        # The decision overtakes the mail its gate held: step 2 has the higher seq.
        assert isinstance(await send(car, processed(decision, step=2, seen=2)), EventsAck)
        assert (await run_row(hub, r1.run_id))["status"] == "running"
        assert isinstance(await send(car, processed(held, step=3, seen=3)), EventsAck)
        run = await run_row(hub, r1.run_id)
        assert (run["last_step"], run["last_seq"], json.loads(str(run["state"]))) == (
            3,
            decision.seq,
            {"seen": 3},
        )
        # An older step arriving late (a new event id) never moves the state back.
        assert isinstance(await send(car, processed(decision, step=2, seen=2)), EventsAck)
        run = await run_row(hub, r1.run_id)
        assert (run["last_step"], json.loads(str(run["state"]))) == (3, {"seen": 3})


@pytest.mark.anyio
async def test_events_for_another_deployments_run_are_kept_not_applied(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, _ = await owned(hub, 0, "mine")
        other = await deploy(hub.store, "other")
        (theirs,) = await accept(hub, other, [b"x"])
        event = processed(theirs, hijacked=True)
        ack = await send(car, event)
        assert isinstance(ack, EventsAck) and ack.ids == [event.event_id]
        run = await run_row(hub, theirs.run_id)
        assert (run["last_seq"], json.loads(str(run["state"]))) == (0, {})
        letter = await hub.one("SELECT source, reason FROM dead_letter")
        assert letter["source"] == "events" and letter["reason"].startswith("foreign_run")


@pytest.mark.anyio
async def test_garbage_frame_is_refused_dead_lettered_and_serving_goes_on(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        garbage = b"\xc1 this is not msgpack"
        assert refused(await car.request(hub.subjects.events, garbage), "decode_error")
        assert refused(await car.request(hub.subjects.hello, b"\x93\x01"), "decode_error")
        letters = await hub.all("SELECT source, subject, reason, data FROM dead_letter ORDER BY id")
        assert [(r["source"], r["subject"]) for r in letters] == [
            ("events", hub.subjects.events),
            ("hello", hub.subjects.hello),
        ]
        assert bytes(letters[0]["data"]) == garbage
        assert letters[0]["reason"].startswith("decode_error")
        assert isinstance(await send(car, processed(r1, seen=1)), EventsAck)


@pytest.mark.anyio
async def test_mint_child_is_deduped_by_request_id(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        session_id, epoch = car.session
        ask = MintChild(
            parent_run_id=r1.run_id,
            request_id="spawn-1",
            deployment_id=car.dep.id,
            session_id=session_id,
            owner_epoch=epoch,
        )
        first = await car.request(hub.subjects.mint, ask)
        again = await car.request(hub.subjects.mint, ask)
        assert isinstance(first, Minted) and isinstance(again, Minted)
        assert first.run_id == again.run_id and first.run_id.startswith("run_")
        child = await run_row(hub, first.run_id)
        assert (child["parent_run_id"], child["status"], child["is_top_level"]) == (
            r1.run_id,
            "pending",
            0,
        )
        ask.request_id = "spawn-2"
        other = await car.request(hub.subjects.mint, ask)
        assert isinstance(other, Minted) and other.run_id != first.run_id


async def mint(car: Sidecar, parent_run_id: str, request_id: str) -> str:
    session_id, epoch = car.session
    ask = MintChild(
        parent_run_id=parent_run_id,
        request_id=request_id,
        deployment_id=car.dep.id,
        session_id=session_id,
        owner_epoch=epoch,
    )
    minted = await car.request(car.subjects.mint, ask)
    assert isinstance(minted, Minted)
    return minted.run_id


@pytest.mark.anyio
async def test_a_child_gets_its_start_item_and_its_end_reaches_the_live_parent_once(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        child = await mint(car, r1.run_id, "spawn-1")
        started = ChildRunStarted(
            event_id=new_id("evt"),
            run_id=r1.run_id,
            child_run_id=child,
            entrypoint="flow:child",
            input={"n": 1},
        )
        for _ in range(2):  # resent: still one start item
            assert isinstance(await send(car, started), EventsAck)
        (start,) = await hub.all("SELECT * FROM workflow_run_dispatch WHERE run_id = ?", child)
        assert (start["kind"], start["sender"], start["subject"]) == (
            "start",
            r1.run_id,
            "flow:child",
        )
        assert json.loads(bytes(start["body"])) == {"n": 1}
        assert (await run_row(hub, child))["entrypoint"] == "flow:child"
        done = RunCompleted(event_id=new_id("evt"), run_id=child, result={"ok": True})
        for _ in range(2):
            assert isinstance(await send(car, done), EventsAck)
        (end,) = await hub.all(
            "SELECT * FROM workflow_run_dispatch WHERE run_id = ? AND kind = 'child'", r1.run_id
        )
        assert (end["sender"], end["subject"], end["message_id"]) == (
            child,
            "completed",
            f"child:{child}",
        )
        assert json.loads(bytes(end["body"])) == {
            "child_run_id": child,
            "status": "completed",
            "result": {"ok": True},
            "error": None,
        }


@pytest.mark.anyio
async def test_a_child_takes_no_trigger_before_its_start_item(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        child = await mint(car, r1.run_id, "spawn-1")
        early = Trigger(deployment_id=car.dep.id, run_id=child, kind="signal", subject="early")
        (refused,), _ = await hub.store.transact(partial(accept_triggers, triggers=[early]))
        assert isinstance(refused, Rejected) and refused.reason == "run_not_started"
        started = ChildRunStarted(
            event_id=new_id("evt"), run_id=r1.run_id, child_run_id=child, entrypoint="flow:c"
        )
        assert isinstance(await send(car, started), EventsAck)
        (accepted,), _ = await hub.store.transact(partial(accept_triggers, triggers=[early]))
        assert isinstance(accepted, Accepted)
        kinds = await hub.all(
            "SELECT kind FROM workflow_run_dispatch WHERE run_id = ? ORDER BY seq", child
        )
        assert [k["kind"] for k in kinds] == ["start", "signal"]


@pytest.mark.anyio
async def test_a_child_started_event_for_a_run_it_did_not_mint_starts_nothing(
    tmp_path: Path,
) -> None:
    # A sidecar naming a run that is not its own child (another top-level
    # run, a child of another parent) cannot give it a start item.
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        other, (r2,) = await owned(hub, 1, name="other")
        stranger = await mint(other, r2.run_id, "spawn-1")
        for target in (stranger, r1.run_id):
            forged = ChildRunStarted(
                event_id=new_id("evt"), run_id=r1.run_id, child_run_id=target, entrypoint="x:y"
            )
            assert isinstance(await send(car, forged), EventsAck)
        starts = await hub.all("SELECT id FROM workflow_run_dispatch WHERE kind = 'start'")
        assert starts == []
        assert (await run_row(hub, stranger))["entrypoint"] is None


@pytest.mark.anyio
async def test_an_ended_parent_gets_no_child_item(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        child = await mint(car, r1.run_id, "spawn-1")
        ended = RunCompleted(event_id=new_id("evt"), run_id=r1.run_id)
        cancelled = RunCancelled(event_id=new_id("evt"), run_id=child, reason="parent run ended")
        assert isinstance(await send(car, ended, cancelled), EventsAck)
        assert (await run_row(hub, child))["status"] == "cancelled"
        rows = await hub.all("SELECT kind FROM workflow_run_dispatch WHERE run_id = ?", r1.run_id)
        assert [r["kind"] for r in rows] == ["mail"]


@pytest.mark.anyio
async def test_mint_refuses_terminal_parents_and_deleted_deployments(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1)
        session_id, epoch = car.session

        def ask(parent: str, request_id: str) -> MintChild:
            return MintChild(
                parent_run_id=parent,
                request_id=request_id,
                deployment_id=car.dep.id,
                session_id=session_id,
                owner_epoch=epoch,
            )

        unknown = await car.request(hub.subjects.mint, ask(new_id("run"), "a"))
        assert refused(unknown, "unknown_run")
        await send(car, RunCompleted(event_id=new_id("evt"), run_id=r1.run_id))
        assert refused(
            await car.request(hub.subjects.mint, ask(r1.run_id, "b")), "workflow_run_terminal"
        )
        count = await hub.one(
            "SELECT COUNT(*) AS n FROM workflow_run WHERE parent_run_id = ?", r1.run_id
        )
        assert count["n"] == 0
        assert await delete_deployment(hub.store, car.dep.id)
        # The deletion bumped the owner epoch: the session is fenced.
        assert refused(await car.request(hub.subjects.mint, ask(r1.run_id, "c")), "stale_epoch")
        count = await hub.one(
            "SELECT COUNT(*) AS n FROM workflow_run WHERE parent_run_id = ?", r1.run_id
        )
        assert count["n"] == 0


@pytest.mark.anyio
async def test_mail_sent_to_a_local_address_is_accepted_once(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1, "sender")
        target = await deploy(hub.store, "target")
        mail = MailSent(
            event_id=new_id("evt"), run_id=r1.run_id, to=target.address, subject="hi", body=b"hello"
        )
        away = MailSent(event_id=new_id("evt"), run_id=r1.run_id, to="someone@example.org")
        for _ in range(2):  # a resend must not mail twice
            ack = await send(car, mail, away)
            assert isinstance(ack, EventsAck) and ack.ids == [mail.event_id, away.event_id]
        rows = await hub.all(
            "SELECT deployment_id, sender, subject, body, message_id, status"
            " FROM workflow_run_dispatch WHERE deployment_id != ?",
            car.dep.id,
        )
        assert [tuple(r) for r in rows] == [
            (target.id, car.dep.address, "hi", b"hello", mail.event_id, "reserved")
        ]


@pytest.mark.anyio
async def test_mail_sent_under_a_reused_message_id_is_dead_lettered(tmp_path: Path) -> None:
    """The event id is the mail's message id: if the target holds it for other
    content, the mail is not delivered, the event is acknowledged all the same
    (the outbox moves on) and the refusal is kept as a dead letter."""
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1, "sender")
        target = await deploy(hub.store, "target")
        mail = MailSent(
            event_id=new_id("evt"), run_id=r1.run_id, to=target.address, subject="hi", body=b"x"
        )
        squat = Trigger(address=target.address, message_id=mail.event_id, subject="hi", body=b"x")
        # The same id, taken first by another sender.
        (taken,), _ = await hub.store.transact(partial(accept_triggers, triggers=[squat]))
        assert isinstance(taken, Accepted)
        later = MailSent(
            event_id=new_id("evt"), run_id=r1.run_id, to=target.address, subject="ok", body=b"y"
        )
        ack = await send(car, mail, later)
        assert isinstance(ack, EventsAck) and ack.ids == [mail.event_id, later.event_id]
        rows = await hub.all(
            "SELECT message_id, sender, subject FROM workflow_run_dispatch"
            " WHERE deployment_id = ? ORDER BY seq",
            target.id,
        )
        assert [tuple(r) for r in rows] == [
            (mail.event_id, None, "hi"),
            (later.event_id, car.dep.address, "ok"),
        ]
        letter = await hub.one("SELECT source, reason, deployment_id, data FROM dead_letter")
        assert (letter["source"], letter["reason"], letter["deployment_id"]) == (
            "events",
            f"message_id_reused: {car.dep.id}",
            car.dep.id,
        )
        assert FrameDecoder(MailSent).decode(bytes(letter["data"])) == mail
        # The frame again (a lost ack): acknowledged, nothing more stored.
        assert isinstance(await send(car, mail), EventsAck)
        assert len(await hub.all("SELECT id FROM dead_letter")) == 1


def _mixed(rs: list[Accepted]) -> list[DispatchProcessed]:
    """Every case the batched path decides in memory, in one run of events."""
    r1, r2, r3, r4 = rs
    first = processed(r1, 1, a=1)
    refused_late = processed(r4, 4)
    refused_late.outcome = "refused_terminal"
    versioned = processed(r2, 6, v=2)
    versioned.version = 2
    return [
        first,
        processed(r3, 3, c=3),  # ahead of r2: moves the run on
        processed(r2, 2, b=2),  # behind: settles its dispatch, moves nothing
        first,  # the same event again in the frame
        DispatchProcessed(  # a dispatch the hub does not have
            event_id=new_id("evt"), run_id=r1.run_id, dispatch_id=new_id("dsp"), step=9
        ),
        refused_late,  # newer, but no state
        processed(r3, 5, again=3),  # a second report of a settled dispatch, newer
        versioned,
    ]


async def _outcome(hub: Hub, run_id: str) -> tuple[object, ...]:
    run = await run_row(hub, run_id)
    dispatches = await hub.all(
        "SELECT seq, status, last_error, version, body_digest IS NOT NULL"
        " FROM workflow_run_dispatch ORDER BY seq"
    )
    (events,) = await hub.one("SELECT COUNT(*) FROM run_event")
    (letters,) = await hub.one("SELECT COUNT(*) FROM dead_letter")
    return (
        {k: run[k] for k in ("status", "state", "last_seq", "last_step", "version")},
        [tuple(d) for d in dispatches],
        events,
        letters,
    )


@pytest.mark.anyio
async def test_a_frame_of_many_processed_events_ends_as_one_event_a_frame_does(
    tmp_path: Path,
) -> None:
    outcomes = []
    for one_a_frame in (False, True):
        async with running_hub(tmp_path / str(one_a_frame)) as hub:
            car, receipts = await owned(hub, 4)
            events = _mixed(receipts)
            frames = [[e] for e in events] if one_a_frame else [events]
            for frame in frames:
                assert isinstance(await send(car, *frame), EventsAck)
            outcomes.append(await _outcome(hub, receipts[0].run_id))
    batched, one_by_one = outcomes
    assert batched == one_by_one
    run, dispatches, events, letters = batched
    assert (run["status"], json.loads(str(run["state"]))) == ("running", {"v": 2})
    assert (run["last_seq"], run["last_step"], run["version"]) == (4, 6, 2)
    assert [d[1:3] for d in dispatches] == [
        ("processed", None),
        ("processed", None),
        ("processed", None),
        ("cancelled", "workflow_run_terminal"),
    ]
    assert (events, letters) == (7, 1)  # the unknown dispatch's event kept, and dead-lettered


@pytest.mark.anyio
async def test_effects_of_a_run_the_hub_terminated_are_not_applied(tmp_path: Path) -> None:
    """Terminated at the hub while the sidecar still worked on an earlier
    item: the mail, child and approval that item committed come in after the
    run ended, and take no effect (the events are acknowledged all the same)."""
    async with running_hub(tmp_path) as hub:
        car, (r1,) = await owned(hub, 1, "sender")
        target = await deploy(hub.store, "target")
        await hub.store.transact(
            partial(cancel_run, run_id=r1.run_id, reason="stop", terminate=True)
        )
        late = [
            MailSent(event_id=new_id("evt"), run_id=r1.run_id, to=target.address, subject="hi"),
            MailSent(event_id=new_id("evt"), run_id=r1.run_id, to="someone@example.org"),
            ApprovalRequested(event_id=new_id("evt"), run_id=r1.run_id, approval_id="apr_late"),
        ]
        ack = await send(car, *late)
        assert isinstance(ack, EventsAck) and ack.ids == [e.event_id for e in late]
        mailed = await hub.one(
            "SELECT COUNT(*) AS n FROM workflow_run_dispatch WHERE deployment_id = ?", target.id
        )
        outside = await hub.one("SELECT COUNT(*) AS n FROM outbound_mail")
        asked = await hub.one("SELECT COUNT(*) AS n FROM approval")
        assert (mailed["n"], outside["n"], asked["n"]) == (0, 0, 0)
        run = await hub.one("SELECT status FROM workflow_run WHERE id = ?", r1.run_id)
        assert run["status"] == "cancelled"
