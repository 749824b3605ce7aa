"""The sidecar end to end on an in-memory bus, against a scripted hub."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import shutil
import stat
from pathlib import Path
from traceback import format_exception
from typing import Any

import anyio
import msgspec
import pytest

from runtime import (
    DispatchProcessed,
    EventsAck,
    Fenced,
    FrameDecoder,
    MailSent,
    Refused,
    RunCompleted,
    RunEvents,
    RunFailed,
    RunSnapshot,
    RunStarted,
    Sources,
    encode,
    new_id,
    read_restore_record,
)
from runtime.testing import MemoryBus
from sidecar import HomeLocked, RunsConfig, Sidecar, SidecarOptions
from tests.support import wait_for
from tests.support.harnesses.sidecar import (
    APPLIED,
    FAST_POLICY,
    Deployment,
    FakeHub,
    bus_connect,
    deployed_sidecar,
    fake_hub,
    mail,
    make_deployment,
    running_sidecar,
)


def seen(events: list[DispatchProcessed]) -> list[dict[str, object]]:
    """The handler's record of items, from the latest DispatchProcessed state."""
    latest = max(events, key=lambda e: e.seq or 0)
    result: list[dict[str, object]] = latest.state.get("seen", [])
    return result


@pytest.mark.anyio
async def test_each_start_is_a_new_incarnation_of_the_same_home(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, car):
        assert car.link is not None and car.link.session is not None
        assert car.link.session.session_id == hub.welcomes[-1].session_id
        first = hub.hellos[-1]
        assert first.instance_id.startswith("ins_") and first.home.startswith("home_")
        # Nothing on disk names the process: a copy cannot pass for it.
        record, version = read_restore_record(dep.record_file)
        assert version == 2 and record.instance_id is None
        await wait_for(
            lambda: (
                read_restore_record(dep.record_file)[0].session_id == hub.welcomes[-1].session_id
            )
        )
    async with deployed_sidecar(dep) as (hub, _):
        again = hub.hellos[-1]
    assert again.instance_id != first.instance_id
    assert again.home == first.home


@pytest.mark.anyio
async def test_a_copy_of_the_state_dir_is_another_home(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "a")
    async with deployed_sidecar(dep) as (hub, _):
        original = hub.hellos[-1].home
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    copy = dataclasses.replace(dep, state_dir=tmp_path / "b")
    async with deployed_sidecar(copy) as (hub, _):
        assert hub.hellos[-1].home != original


@pytest.mark.anyio
async def test_a_second_process_on_the_same_state_dir_stops(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        second = Sidecar(SidecarOptions(state_dir=dep.state_dir, deployment_id=dep.id))
        with anyio.fail_after(5), pytest.raises(HomeLocked):
            await second.run()
        assert len(hub.hellos) == 2, "the second process never said hello"
        assert second.inbox is None, "nor opened the inbox"


@pytest.mark.anyio
async def test_boots_from_a_v1_record_and_rewrites_it_as_v2_0600(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path, version=1)
    assert read_restore_record(dep.record_file)[1] == 1
    async with deployed_sidecar(dep) as (hub, _):
        # The hub verified the hello signature with the key from the v1 record.
        assert hub.welcomes
    record, version = read_restore_record(dep.record_file)
    assert version == 2
    assert record.hub_key.seed == dep.seed
    assert record.public_key == dep.public_key
    assert record.instance_id is None
    assert stat.S_IMODE(dep.record_file.stat().st_mode) == 0o600


@pytest.mark.anyio
async def test_a_duplicate_frame_is_acked_duplicate_and_stored_once(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        frame = mail(dep, 1, "hello")
        assert (await hub.deliver(frame)).result == "stored"
        assert (await hub.deliver(frame)).result == "duplicate"
        await hub.wait_events(DispatchProcessed, 1)
    assert dep.query("SELECT count(*) FROM inbox") == [(1,)]
    assert len(hub.of_kind(DispatchProcessed)) == 1


@pytest.mark.anyio
async def test_frames_arriving_out_of_order_are_processed_in_seq_order(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, car):
        for seq in (3, 2):
            assert (await hub.deliver(mail(dep, seq, f"m{seq}"))).result == "stored"
        assert car.runs is not None
        await car.runs.idle.wait()
        # Seq 1 is missing: nothing may run ahead of it.
        assert dep.query("SELECT count(*) FROM inbox WHERE state = 'pending'") == [(2,)]
        assert hub.of_kind(DispatchProcessed) == []
        assert (await hub.deliver(mail(dep, 1, "m1"))).result == "stored"
        await hub.wait_events(DispatchProcessed, 3)
    processed = hub.of_kind(DispatchProcessed)
    assert [e.seq for e in processed] == [1, 2, 3]
    assert [s["subject"] for s in seen(processed)] == ["m1", "m2", "m3"]


@pytest.mark.anyio
async def test_the_handler_sees_items_in_order_with_bodies(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    bodies = [b"plain text", "h\u00e9llo".encode(), b"\xff\xfe broken utf-8"]
    async with deployed_sidecar(dep) as (hub, _):
        for seq, body in enumerate(bodies, start=1):
            await hub.deliver(mail(dep, seq, f"s{seq}", body))
        await hub.wait_events(DispatchProcessed, 3)
    items = seen(hub.of_kind(DispatchProcessed))
    assert [i["text"] for i in items] == ["plain text", "h\u00e9llo", "\ufffd\ufffd broken utf-8"]
    assert [i["size"] for i in items] == [len(b) for b in bodies]
    assert {i["kind"] for i in items} == {"mail"}
    run_started = hub.of_kind(RunStarted)
    assert len(run_started) == 1
    assert {i["run_id"] for i in items} == {run_started[0].run_id}


async def deliver_in_one_frame(hub: FakeHub, dep: Deployment, n: int) -> None:
    """Mails m1..mn to ``dep`` in one MailBatch frame, each stored."""
    frames = [mail(dep, seq, f"m{seq}") for seq in range(1, n + 1)]
    assert [a.result for a in (await hub.deliver_batch(frames)).acks] == ["stored"] * n


def recording(tmp_path: Path, middle: str) -> tuple[Deployment, Path]:
    """A deployment whose handler writes each item's subject to the file it
    returns beside it, runs ``middle`` (lines of the handler), then records
    the item in the run's state."""
    calls = tmp_path / "calls"
    source = f"""
import os, anyio
async def main(ctx, item):
    with open({str(calls)!r}, "a") as f:
        f.write(item.subject + "\\n"){middle}
    ctx.state.setdefault("seen", []).append({{"subject": item.subject}})
"""
    return make_deployment(tmp_path / "state", source=source), calls


@pytest.mark.anyio
async def test_a_step_that_ran_past_its_budget_commits_before_the_next_envelope(
    tmp_path: Path,
) -> None:
    # m1 takes longer than a step's budget, m2 waits for the gate: m1's
    # commit (and its event) must not wait for m2, though both came in one
    # frame and are read in one batch.
    gate = tmp_path / "gate"
    dep, calls = recording(
        tmp_path,
        f"""
    if item.subject == "m1":
        await anyio.sleep({RunsConfig().step_budget * 1.5})  # a slow item
    while item.subject == "m2" and not os.path.exists({str(gate)!r}):
        await anyio.sleep(0.005)""",
    )
    async with deployed_sidecar(dep) as (hub, _):
        await deliver_in_one_frame(hub, dep, 3)
        await hub.wait_events(DispatchProcessed, 1)
        assert dep.query("SELECT seq FROM inbox WHERE outcome = 'processed'") == [(1,)]
        gate.touch()
        await hub.wait_events(DispatchProcessed, 3)
    assert [s["subject"] for s in seen(hub.of_kind(DispatchProcessed))] == ["m1", "m2", "m3"]
    # Not m1 committed by m2's failing (a handler timeout keeps what the
    # batch did before it): each handler ran once.
    assert calls.read_text().split() == ["m1", "m2", "m3"]


@pytest.mark.slow  # waits out a handler timeout
@pytest.mark.anyio
async def test_a_handler_past_its_timeout_fails_alone_and_its_item_is_retried(
    tmp_path: Path,
) -> None:
    # m2 hangs on its first call, in the step that began with m1: the step
    # commits m1 with m2's failed attempt, m2's call is cancelled at its
    # timeout, and its retry processes m2, then m3.
    hung = tmp_path / "hung"
    dep, calls = recording(
        tmp_path,
        f"""
    if item.subject == "m2" and not os.path.exists({str(hung)!r}):
        open({str(hung)!r}, "w").close()
        await anyio.sleep(3600)  # only its timeout ends it""",
    )
    policy = msgspec.structs.replace(FAST_POLICY, handler_timeout=0.5)
    async with deployed_sidecar(dep, policy=policy) as (hub, _):
        await deliver_in_one_frame(hub, dep, 3)
        await hub.wait_events(DispatchProcessed, 3)
    assert [s["subject"] for s in seen(hub.of_kind(DispatchProcessed))] == ["m1", "m2", "m3"]
    assert calls.read_text().split() == ["m1", "m2", "m2", "m3"]


@pytest.mark.anyio
async def test_state_survives_a_restart_and_nothing_is_processed_twice(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    bus = MemoryBus()
    async with fake_hub(bus, dep) as hub:
        async with running_sidecar(bus, dep):
            for seq in (1, 2):
                await hub.deliver(mail(dep, seq, f"m{seq}"))
            await hub.wait_events(DispatchProcessed, 2)
        # Stored while the sidecar was down? No: it is down, so seq 3 comes after.
        async with running_sidecar(bus, dep):
            await hub.deliver(mail(dep, 3, "m3"))
            await hub.wait_events(DispatchProcessed, 3)
            # Acknowledged events leave the outbox, their envelopes their bodies.
            await wait_for(lambda: dep.query(APPLIED) == [(3, 0)])
    processed = hub.of_kind(DispatchProcessed)
    assert sorted(e.seq or 0 for e in processed) == [1, 2, 3]
    assert [s["subject"] for s in seen(processed)] == ["m1", "m2", "m3"]
    assert len(hub.of_kind(RunStarted)) == 1


@pytest.mark.slow  # a sidecar stopped and started again
@pytest.mark.anyio
async def test_envelopes_stored_before_a_stop_are_processed_from_disk_without_a_hub(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    source = f"""
import os, anyio
async def main(ctx, item):
    while not os.path.exists({str(gate)!r}):
        await anyio.sleep(0.005)
    ctx.state.setdefault("seen", []).append(item.subject)
"""
    dep = make_deployment(tmp_path / "state", source=source)
    async with deployed_sidecar(dep) as (hub, _):
        for seq in (1, 2):
            assert (await hub.deliver(mail(dep, seq, f"m{seq}"))).result == "stored"
    # Stopped while the handler was stuck on seq 1: nothing was committed.
    assert dep.query("SELECT count(*) FROM inbox WHERE state = 'pending'") == [(2,)]
    assert dep.query("SELECT count(*) FROM run_state") == [(0,)]
    gate.touch()
    async with running_sidecar(MemoryBus(), dep, wait_session=False):  # no hub at all now
        await wait_for(
            lambda: dep.query("SELECT count(*) FROM inbox WHERE state = 'done'") == [(2,)]
        )
    (state,) = dep.query("SELECT state FROM run_state")
    assert msgspec.msgpack.decode(state[0]) == {"seen": ["m1", "m2"]}
    assert dep.query("SELECT kind FROM outbox ORDER BY pos") == [
        ("RunStarted",),
        ("DispatchProcessed",),
        ("DispatchProcessed",),
    ]


@pytest.mark.anyio
async def test_claim_checked_body_is_fetched_and_verified(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    body = bytes(range(256)) * 1000  # 256 KB: several chunks
    async with deployed_sidecar(dep, chunk_size=100_000) as (hub, _):
        ack = await hub.deliver(mail(dep, 1, "big", None, claim=hub.claim(body)))
        assert ack.result == "stored"
        await hub.wait_events(DispatchProcessed, 1)
    assert seen(hub.of_kind(DispatchProcessed))[0]["size"] == len(body)


@pytest.mark.anyio
async def test_a_raw_message_is_fetched_and_given_to_the_handler_as_item_raw(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    raw = b"From: a@b.c\r\nSubject: big\r\n\r\n" + bytes(range(256)) * 700
    digest = hashlib.sha256(raw).hexdigest()
    async with deployed_sidecar(dep, chunk_size=100_000, corrupt_blobs=True) as (hub, _):
        frame = mail(dep, 1, "big", b"text", raw=hub.claim(raw))
        ack = await hub.deliver(frame)
        # The raw message is part of the dispatch: one that does not arrive
        # intact refuses it, and the hub sends it again.
        assert (ack.result, ack.reason) == ("refused", "digest_mismatch")
        assert dep.query("SELECT count(*) FROM inbox") == [(0,)]
        hub.corrupt_blobs = False
        assert (await hub.deliver(frame)).result == "stored"
        await hub.wait_events(DispatchProcessed, 1)
    [item] = seen(hub.of_kind(DispatchProcessed))
    assert (item["text"], item["raw"]) == ("text", digest)


@pytest.mark.anyio
async def test_a_late_copy_of_an_applied_mail_is_a_duplicate_without_its_blob(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        frame = mail(dep, 1, "big", None, claim=hub.claim(b"x" * 70_000))
        assert (await hub.deliver(frame)).result == "stored"
        await wait_for(lambda: dep.query(APPLIED) == [(1, 0)])
        hub.blobs.clear()  # the hub collected it once the dispatch was processed
        assert (await hub.deliver(frame)).result == "duplicate"
        # Another copy under an id this inbox never kept: its seq is done here.
        late = mail(dep, 1, "big", None, claim=frame.claim)
        assert (await hub.deliver(late)).result == "duplicate"
    assert dep.query("SELECT count(*), sum(length(envelope)) FROM inbox") == [(1, 0)]


@pytest.mark.anyio
async def test_a_corrupted_blob_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, corrupt_blobs=True) as (hub, _):
        ack = await hub.deliver(mail(dep, 1, "big", None, claim=hub.claim(b"x" * 70_000)))
        assert ack.result == "refused"
        assert ack.reason.startswith("digest_mismatch")
        hub.corrupt_blobs = False  # the hub retries; now the blob comes intact
        frame = mail(dep, 1, "big", None, claim=hub.claim(b"y" * 70_000))
        assert (await hub.deliver(frame)).result == "stored"
    assert dep.query("SELECT count(*) FROM inbox") == [(1,)]


@pytest.mark.anyio
async def test_garbage_is_refused_and_dead_lettered_and_work_goes_on(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        ack = await hub.deliver(b"\xc1 not msgpack")
        assert (ack.dispatch_id, ack.result) == ("", "refused")
        assert ack.reason.startswith("decode_error")
        assert (await hub.deliver(mail(dep, 1, "after"))).result == "stored"
        await hub.wait_events(DispatchProcessed, 1)
    assert dep.query("SELECT data FROM dead_letter") == [(b"\xc1 not msgpack",)]


@pytest.mark.anyio
async def test_frames_for_another_deployment_or_an_old_epoch_are_refused(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, epoch=2) as (hub, _):
        stale = await hub.deliver(mail(dep, 1, "old", owner_epoch=1))
        assert (stale.result, stale.reason) == ("refused", "stale_epoch")
        other = await hub.deliver(mail(dep, 1, "x", deployment_id="dep_" + "0" * 26))
        assert (other.result, other.reason) == ("refused", "wrong_deployment")
    assert dep.query("SELECT count(*) FROM inbox") == [(0,)]


@pytest.mark.anyio
async def test_a_handler_that_raises_once_is_retried_from_the_committed_state(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        for seq, subject in enumerate(["a", "flaky", "b"], start=1):
            await hub.deliver(mail(dep, seq, subject))
        await hub.wait_events(DispatchProcessed, 3)
    # The failed attempt appended to the state before raising; that is gone.
    assert [s["subject"] for s in seen(hub.of_kind(DispatchProcessed))] == ["a", "flaky", "b"]
    assert hub.of_kind(RunFailed) == []


@pytest.mark.anyio
async def test_a_handler_that_always_raises_fails_the_run_and_does_not_wedge(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "ok"))
        await hub.deliver(mail(dep, 2, "poison"))
        await hub.deliver(mail(dep, 3, "later"))
        await hub.wait_events(DispatchProcessed, 3)
        await hub.wait_events(RunFailed, 1)
    failed = hub.of_kind(RunFailed)[0]
    assert "poisoned mail" in failed.error
    outcomes = {e.seq: e.outcome for e in hub.of_kind(DispatchProcessed)}
    assert outcomes == {1: "processed", 2: "failed", 3: "refused_terminal"}
    assert dep.query("SELECT status, error FROM run") == [("failed", failed.error)]
    assert dep.query("SELECT seq, outcome FROM inbox ORDER BY seq") == [
        (1, "processed"),
        (2, "failed"),
        (3, "refused_terminal"),
    ]


@pytest.mark.anyio
async def test_a_handler_failure_is_logged_with_its_traceback_and_kept_as_the_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        poison = mail(dep, 1, "poison")
        await hub.deliver(poison)
        await hub.wait_events(RunFailed, 1)
    assert hub.of_kind(RunFailed)[0].error == "ValueError: poisoned mail"
    assert dep.query("SELECT error FROM run") == [("ValueError: poisoned mail",)]
    crashes = [r for r in caplog.records if "failed" in r.getMessage() and r.exc_info]
    # Each attempt is logged, the one past the budget too.
    assert len(crashes) == FAST_POLICY.max_attempts
    for record in crashes:
        assert record.levelno == logging.WARNING
        assert record.getMessage().endswith("ValueError: poisoned mail")
        assert record.exc_info is not None
        traceback = "".join(format_exception(*record.exc_info))
        assert 'raise ValueError("poisoned mail")' in traceback  # the handler's own line
        assert f"handling dispatch {poison.dispatch_id} (seq 1) of run {dep.address}" in traceback


@pytest.mark.anyio
async def test_state_that_is_not_json_fails_the_run_with_a_typed_error(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "not-json"))
        await hub.wait_events(RunFailed, 1)
    assert hub.of_kind(RunFailed)[0].error.startswith("StateNotSerializable")


@pytest.mark.anyio
async def test_complete_ends_the_run_and_later_items_are_refused_terminal(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        for seq, subject in enumerate(["a", "stop", "late"], start=1):
            await hub.deliver(mail(dep, seq, subject))
        await hub.wait_events(DispatchProcessed, 3)
    (completed,) = hub.of_kind(RunCompleted)
    assert completed.result == {"count": 2}
    assert {e.seq: e.outcome for e in hub.of_kind(DispatchProcessed)}[3] == "refused_terminal"
    assert dep.query("SELECT status, result FROM run") == [("completed", b'{"count":2}')]


@pytest.mark.anyio
async def test_send_is_committed_as_a_mail_sent_event(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "send", b"payload"))
        await hub.wait_events(MailSent, 1)
    (sent,) = hub.of_kind(MailSent)
    assert (sent.to, sent.subject, sent.body) == ("someone@example.org", "hello", b"payload")


@pytest.mark.anyio
async def test_events_are_resent_until_acknowledged(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, request_timeout=0.2, drop_acks=1) as (hub, _):
        await hub.deliver(mail(dep, 1, "a"))
        # RunStarted + DispatchProcessed, both acknowledged in the end.
        await wait_for(lambda: dep.query(APPLIED) == [(1, 0)])
        # The first batch got no ack: it went again, and the hub saw it twice.
        assert hub.batches == 2
    assert len(hub.of_kind(DispatchProcessed)) == 1


@pytest.mark.anyio
async def test_unknown_session_on_events_makes_the_sidecar_say_hello_again(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, refuse_events=["unknown_session"]) as (hub, _):
        await hub.deliver(mail(dep, 1, "a"))
        # The resend may beat the new welcome (the fake takes it under the old
        # session): what matters is that the refusal brought a second hello.
        await wait_for(lambda: len(hub.welcomes) == 2, what="a second hello")
        await hub.wait_events(DispatchProcessed, 1)
        await wait_for(lambda: dep.query(APPLIED) == [(1, 0)], what="the events acknowledged")


@pytest.mark.anyio
async def test_a_refusal_of_a_frame_from_an_earlier_session_brings_no_hello(
    tmp_path: Path,
) -> None:
    # After a hub restart, events in flight to the old hub come back refused
    # just after the new session began: a hello for each replaced a session
    # that was fine (and cost a hub restart with 100 sidecars half a second).
    dep = make_deployment(tmp_path)
    refusals = ["unknown_session", "stale_epoch", "unknown_session", "unknown_session"]
    async with deployed_sidecar(dep, refuse_events=list(refusals)) as (_, car):
        link = car.link
        assert link is not None and link.session is not None
        current = link.session
        asked: list[str] = []
        link.rehello = lambda: asked.append("hello")  # type: ignore[method-assign]
        replies: FrameDecoder[Any] = FrameDecoder(EventsAck | Refused)

        async def refuse(session_id: str) -> None:
            frame = RunEvents(session_id=session_id, owner_epoch=current.owner_epoch, events=[])
            reply = await link.request(link.subjects.events, frame, replies, 5.0)
            assert isinstance(reply, Refused)

        await refuse(new_id("ses"))
        await refuse(new_id("ses"))
        assert asked == []
        link._helloing = True  # a hello on its way answers a refusal meanwhile
        await refuse(current.session_id)
        assert asked == []
        link._helloing = False
        await refuse(current.session_id)
        assert asked == ["hello"]


@pytest.mark.anyio
async def test_hub_boot_makes_the_sidecar_say_hello_again(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, car):
        assert len(hub.welcomes) == 1
        await hub.announce(hub.boot_id)  # the same hub again: nothing to do
        await hub.announce("boot_" + "1" * 26)
        await wait_for(lambda: len(hub.welcomes) == 2)
        assert car.link is not None
        await wait_for(
            lambda: (
                car.link is not None
                and car.link.session is not None
                and car.link.session.hub_boot_id == "boot_" + "1" * 26
            )
        )
        assert len(hub.welcomes) == 2


@pytest.mark.anyio
async def test_a_new_hub_boot_abandons_the_request_in_flight_and_resends_at_once(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, request_timeout=60.0, drop_acks=1) as (hub, _):
        await hub.deliver(mail(dep, 1, "a"))
        # The hub took the events and will never answer: it "died" meanwhile.
        await wait_for(lambda: hub.batches == 1)
        await hub.announce("boot_" + "2" * 26)
        # Resent long before the 60 s request timeout (maybe before the new
        # welcome: the fake takes it under the old session), and hello again.
        await wait_for(lambda: dep.query(APPLIED) == [(1, 0)], timeout=10, what="a resend")
        await wait_for(lambda: len(hub.welcomes) == 2, what="a hello to the new hub")
        assert hub.batches == 2
    assert len(hub.of_kind(DispatchProcessed)) == 1


@pytest.mark.anyio
async def test_a_transport_reconnect_makes_the_sidecar_say_hello_again(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    bus = MemoryBus()
    async with fake_hub(bus, dep) as hub, running_sidecar(bus, dep) as car:
        assert car.link is not None
        transport = car.link.transport
        await bus.disconnect(transport)  # type: ignore[arg-type]
        await bus.reconnect(transport)  # type: ignore[arg-type]
        await wait_for(lambda: len(hub.welcomes) == 2)


async def _deleted_notice_then(tmp_path: Path, *, revoke: bool) -> tuple[list[str], int]:
    """A Fenced{deployment_not_live} notice; then NATS revokes the sidecar's
    identity before (``revoke``) or after the hub welcomed the hello the
    notice asked for. Why the sidecar stopped as deleted (empty: it did
    not), and the hellos the hub saw."""
    from sidecar import DeploymentGone, Sidecar, SidecarOptions

    dep = make_deployment(tmp_path)
    bus = MemoryBus()
    notice = Fenced(deployment_id=dep.id, reason="deployment_not_live")
    async with fake_hub(bus, dep) as hub:
        car = Sidecar(
            SidecarOptions(state_dir=tmp_path, deployment_id=dep.id, hello_timeout=0.2),
            connect=bus_connect(bus),
        )
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                try:
                    await car.run()
                except DeploymentGone as exc:
                    why.append(str(exc))
                gone.set()

            gone, why = anyio.Event(), list[str]()
            tg.start_soon(run)
            await wait_for(lambda: len(hub.welcomes) == 1, what="a session")
            assert car.link is not None
            transport = car.link.transport
            if revoke:
                # The race an e2e run hit: the notice arrives, and NATS
                # revokes the identity before the hub answers the hello.
                hub.silent_hellos = True
                asked = len(hub.hellos)
                await hub.transport.publish(hub.subjects.inbound(dep.id), encode(notice))
                await wait_for(
                    lambda: len(hub.hellos) > asked, what="the hello the notice asks for"
                )
                await bus.revoke(transport)  # type: ignore[arg-type]
                with anyio.fail_after(10):
                    await gone.wait()
                return why, len(hub.welcomes)
            # A notice alone (anyone able to publish on the subject could send
            # one) costs a hello; the hub welcomes it, and it carries on.
            await hub.transport.publish(hub.subjects.inbound(dep.id), encode(notice))
            await wait_for(lambda: len(hub.welcomes) == 2, what="the hello the notice asks for")
            await wait_for(lambda: car.link is not None and not car.link.told_gone)
            await bus.revoke(transport)  # type: ignore[arg-type]
            await wait_for(lambda: transport.credentials_refused)
            await bus.reconnect(transport)  # type: ignore[arg-type]
            await wait_for(lambda: len(hub.welcomes) == 3, what="a hello after the outage")
            car.stop()
        return why, len(hub.welcomes)


@pytest.mark.anyio
async def test_a_deleted_notice_with_the_identity_revoked_stops_the_sidecar(
    tmp_path: Path,
) -> None:
    why, welcomes = await _deleted_notice_then(tmp_path, revoke=True)
    assert why == [
        "hub refused: deployment_not_live (the hub said the deployment was deleted"
        " and NATS revoked its identity)"
    ]
    assert welcomes == 1  # the hello the notice asked for was never answered


@pytest.mark.anyio
async def test_a_deleted_notice_the_hub_contradicts_is_forgotten(tmp_path: Path) -> None:
    why, welcomes = await _deleted_notice_then(tmp_path, revoke=False)
    assert why == [] and welcomes == 3


@pytest.mark.anyio
async def test_owner_conflict_stops_the_sidecar_with_a_clear_error(tmp_path: Path) -> None:
    import anyio

    from sidecar import OwnerConflict, Sidecar, SidecarOptions

    dep = make_deployment(tmp_path)
    bus = MemoryBus()
    async with fake_hub(bus, dep, refuse_hello="owner_conflict"):
        car = Sidecar(
            SidecarOptions(state_dir=tmp_path, deployment_id=dep.id),
            connect=bus_connect(bus),
        )
        with anyio.fail_after(5), pytest.raises(OwnerConflict):
            await car.run()


@pytest.mark.anyio
async def test_takeover_is_asked_for_on_the_first_hello_only(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep, takeover=True) as (hub, _):
        await hub.announce("boot_" + "2" * 26)
        await wait_for(lambda: len(hub.welcomes) == 2)
    signed = [h for h in hub.hellos if h.nonce is not None]
    assert [h.takeover for h in signed] == [True, False]


@pytest.mark.anyio
async def test_a_takeover_starts_from_the_hubs_state_even_after_a_failed_first_try(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    first, second, third = mail(dep, 1, "one"), mail(dep, 2, "two"), mail(dep, 3, "three")
    # This disk processed all three; the hub applied only the first (the
    # others' events never left: the hub refused them).
    async with deployed_sidecar(dep) as (hub, _):
        assert (await hub.deliver(first)).result == "stored"
        await hub.wait_events(DispatchProcessed, 1)
        hub.refuse_events = ["store_unavailable"] * 1000
        for frame in (second, third):
            assert (await hub.deliver(frame)).result == "stored"
        await wait_for(lambda: dep.query("SELECT count(*) FROM outbox WHERE acked = 0")[0][0] > 0)
    (applied,) = hub.of_kind(DispatchProcessed)
    run_id = applied.run_id
    stale = {row[0] for row in dep.query("SELECT event_id FROM outbox WHERE acked = 0")}
    # Taken over from another home: the first welcome says so, and its state
    # request fails; the second welcome does not say so, and it adopts anyway.
    snapshot = RunSnapshot(run_id=run_id, status="running", state=applied.state, last_seq=1)
    async with deployed_sidecar(
        dep, from_hub=1, refuse_state=1, states=[snapshot], floor_seq=1
    ) as (hub, car):
        assert len(hub.welcomes) == 2
        assert car.link is not None and car.link.session is not None
        assert car.link.session.session_id == hub.welcomes[1].session_id
        # The copy's unshipped events are gone (what is there now, if anything,
        # is the processing of seq 2 and 3 anew, from the hub's state).
        left = {row[0] for row in dep.query("SELECT event_id FROM outbox")}
        assert not stale & left
        for frame in (second, third):
            assert (await hub.deliver(frame)).result == "duplicate"
        await hub.wait_events(DispatchProcessed, 2)
        latest = max(hub.of_kind(DispatchProcessed), key=lambda e: e.seq or 0)
        assert [s["subject"] for s in latest.state["seen"]] == ["one", "two", "three"]
        # What this disk did that the hub never applied was dropped, not sent.
        assert stale and not stale & hub.events.keys()


VERSION_2 = """
async def main(ctx, item):
    ctx.state.setdefault("v2", []).append(item.subject)
"""


@pytest.mark.anyio
async def test_an_item_of_a_later_version_is_stored_once_its_code_is_here(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    sources = msgspec.json.encode(Sources(entrypoint="flow:main", files={"flow.py": VERSION_2}))
    async with deployed_sidecar(dep) as (hub, _):
        code = hub.claim(sources)
        hub.blobs.clear()  # the hub cannot give the code yet
        frame = mail(dep, 1, "first", version=2, code=code)
        ack = await hub.deliver(frame)
        assert (ack.result, ack.reason) == ("refused", "blob_unavailable")
        assert dep.query("SELECT count(*) FROM inbox") == [(0,)]
        hub.claim(sources)  # now it can: the hub's next round stores it
        assert (await hub.deliver(frame)).result == "stored"
        await hub.wait_events(DispatchProcessed, 1)
    [processed] = hub.of_kind(DispatchProcessed)
    assert (processed.version, processed.state) == (2, {"v2": ["first"]})
