"""Size limits where the handler's effects are committed, and the shipper's frames.

A value over its limit fails its run at once with an error naming the limit
and the size, the envelope is consumed and later ones move on; events ship
in frames that fit a NATS message; an event that could not fit is set aside,
never resent forever.
"""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import (
    MAX_FRAME_BYTES,
    WIRE_MAX_PAYLOAD,
    ApprovalRequested,
    DispatchProcessed,
    MailSent,
    RunFailed,
    encode,
    new_id,
    open_nats,
)
from runtime.wire import (
    MAX_EVENT,
    MAX_INPUT,
    MAX_MAIL,
    MAX_PROMPT,
    MAX_RESULT,
    MAX_STATE,
    SizeLimit,
    clip_text,
    encoded_size,
)
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.sidecar import (
    APPLIED,
    Deployment,
    deployed_sidecar,
    fake_hub_on,
    mail,
    make_deployment,
)

from ..test_process import exited, sidecar_process

# The subject says what to make and how big: "state 300000", "mail 100", ...
# Every call is written down, so a test sees how often an item was tried.
SIZED = """
from pathlib import Path

CALLS = Path({calls!r})


async def main(ctx, item):
    with CALLS.open("a") as f:
        f.write(item.subject + "\\n")
    what, _, size = item.subject.partition(" ")
    n = int(size or 0)
    if what == "state":
        ctx.state["blob"] = "x" * n
    elif what == "result":
        ctx.complete("x" * n)
    elif what == "mail":
        ctx.send("someone@example.org", "s", b"x" * n)
    elif what == "input":
        await ctx.spawn("flow:child", "x" * n)
    elif what == "prompt":
        await ctx.request_approval("x" * n)
    elif what == "address":
        ctx.send("x" * n + "@example.org")
    elif what == "fail":
        ctx.fail("x" * n)
    elif what == "mails":
        for i in range(n):
            ctx.send("someone@example.org", str(i), b"x" * 100_000)
    ctx.state["count"] = ctx.state.get("count", 0) + 1
"""


def sized(tmp_path: Path) -> Deployment:
    return make_deployment(tmp_path, source=SIZED.format(calls=str(tmp_path / "calls")))


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


def over(limit: SizeLimit) -> int:
    return limit.bytes + 1000


# (subject, the limit it passes, what the error calls the value, its encoded size)
CASES: list[tuple[str, SizeLimit, str, int | None]] = [
    (
        f"state {over(MAX_STATE)}",
        MAX_STATE,
        "ctx.state",
        encoded_size({"count": 2, "blob": "x" * over(MAX_STATE)}),
    ),
    (
        f"result {over(MAX_RESULT)}",
        MAX_RESULT,
        "the run result",
        encoded_size("x" * over(MAX_RESULT)),
    ),
    (
        f"mail {over(MAX_MAIL)}",
        MAX_MAIL,
        "the mail's subject and body",
        encoded_size(("s", b"x" * over(MAX_MAIL))),
    ),
    (
        f"input {over(MAX_INPUT)}",
        MAX_INPUT,
        "the child run input",
        encoded_size("x" * over(MAX_INPUT)),
    ),
    (
        f"prompt {over(MAX_PROMPT)}",
        MAX_PROMPT,
        "the approval prompt",
        encoded_size("x" * over(MAX_PROMPT)),
    ),
    # No value limit covers a recipient address: the event limit does.
    (f"address {over(MAX_EVENT)}", MAX_EVENT, "the MailSent event", None),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("subject", "limit", "what", "size"), CASES, ids=[c[1].name for c in CASES]
)
async def test_a_value_over_its_limit_fails_the_run_at_once_and_later_mail_moves_on(
    tmp_path: Path, subject: str, limit: SizeLimit, what: str, size: int | None
) -> None:
    dep = sized(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "ok"))
        await hub.deliver(mail(dep, 2, subject))
        await hub.deliver(mail(dep, 3, "later"))
        await hub.wait_events(DispatchProcessed, 3)
        await hub.wait_events(RunFailed, 1)
    (failed,) = hub.of_kind(RunFailed)
    assert failed.error.startswith(f"LimitExceeded: {what} is ")
    assert f"over the limit {limit.name} = {limit.bytes} bytes" in failed.error
    if size is not None:
        assert f" is {size} bytes encoded" in failed.error
    # Tried once: retrying cannot make the value smaller.
    assert calls(tmp_path) == ["ok", subject]
    outcomes = {e.seq: e.outcome for e in hub.of_kind(DispatchProcessed)}
    assert outcomes == {1: "processed", 2: "failed", 3: "refused_terminal"}
    # The state stays the one committed before: the too-large item left nothing.
    assert {e.seq: e.state for e in hub.of_kind(DispatchProcessed)}[2] == {"count": 1}
    assert hub.of_kind(MailSent) == [] and hub.of_kind(ApprovalRequested) == []
    assert dep.query("SELECT status, error FROM run") == [("failed", failed.error)]


@pytest.mark.anyio
async def test_values_at_their_limits_are_committed_and_shipped(tmp_path: Path) -> None:
    dep = sized(tmp_path)
    near_state = MAX_STATE.bytes - 100  # the state's other key and framing fit in the rest
    near_mail = MAX_MAIL.bytes - 100
    subjects = [f"state {near_state}", f"mail {near_mail}", f"prompt {MAX_PROMPT.bytes - 100}"]
    async with deployed_sidecar(dep) as (hub, _):
        for seq, subject in enumerate(subjects, start=1):
            await hub.deliver(mail(dep, seq, subject))
        await hub.wait_events(DispatchProcessed, 3)
    assert hub.of_kind(RunFailed) == []
    assert len(hub.of_kind(MailSent)[0].body) == near_mail
    # Every DispatchProcessed carries the whole state, near its limit.
    assert all(len(e.state["blob"]) == near_state for e in hub.of_kind(DispatchProcessed))
    assert max(hub.frame_sizes) <= MAX_FRAME_BYTES


@pytest.mark.anyio
async def test_a_long_error_is_cut_not_refused(tmp_path: Path) -> None:
    dep = sized(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "fail 1000000"))
        await hub.wait_events(RunFailed, 1)
    (failed,) = hub.of_kind(RunFailed)
    assert failed.error == clip_text("x" * 1_000_000)
    assert 15_000 < len(failed.error.encode()) <= 16 * 1024
    assert failed.error.endswith(f"[{1_000_000 - (16 * 1024 - 64)} bytes cut]")


@pytest.mark.slow  # a real sidecar process: megabytes of events over a real nats-server
@pytest.mark.anyio
async def test_events_larger_than_a_message_together_ship_in_several_frames_in_order(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    # A real sidecar process on a real nats-server: NATS, not the test, says
    # what fits. One item sends 30 mails of 100 KB: 3 MB of events.
    dep = make_deployment(tmp_path / "state", source=SIZED.format(calls=str(tmp_path / "calls")))
    async with (
        open_nats(nats_server.url, name="fake hub") as transport,
        fake_hub_on(transport, dep) as hub,
    ):
        args = ("--state-dir", str(dep.state_dir), "--nats", nats_server.url)
        with sidecar_process(*args, log=tmp_path / "sidecar.log") as proc:
            await wait_for(lambda: len(hub.welcomes) == 1, timeout=10)
            assert (await hub.deliver(mail(dep, 1, "mails 30"))).result == "stored"
            await hub.wait_events(DispatchProcessed, 1)
            proc.send_signal(signal.SIGTERM)
            assert await exited(proc) == 0
    sent = hub.of_kind(MailSent)
    assert [m.subject for m in sent] == [str(i) for i in range(30)]  # in order
    assert list(hub.events.values())[-1] == hub.of_kind(DispatchProcessed)[0]
    assert len(hub.frame_sizes) >= 4
    assert max(hub.frame_sizes) <= MAX_FRAME_BYTES
    assert len(hub.welcomes) == 1


@pytest.mark.anyio
async def test_an_event_that_cannot_fit_a_message_is_set_aside_not_resent_forever(
    tmp_path: Path,
) -> None:
    # None is committed by this release (the limits forbid it): one is put in
    # the outbox by hand, as an older release or a bug could have left it.
    dep = sized(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "ok"))
        await hub.wait_events(DispatchProcessed, 1)
    run_id = hub.of_kind(DispatchProcessed)[0].run_id
    huge = MailSent(
        event_id=new_id("evt"), run_id=run_id, to="a@example.org", body=b"x" * WIRE_MAX_PAYLOAD
    )
    db = sqlite3.connect(dep.inbox_file)
    with db:
        db.execute(
            "INSERT INTO outbox (event_id, run_id, kind, frame) VALUES (?, ?, 'MailSent', ?)",
            (huge.event_id, run_id, encode(huge)),
        )
    db.close()
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 2, "after"))
        await hub.wait_events(DispatchProcessed, 1)
        # The hub has the events; the sidecar marks them acknowledged once the
        # answer is in, which may come after the hub saw them: the outbox
        # drains, the huge event set aside.
        await wait_for(
            lambda: dep.query("SELECT count(*) FROM outbox WHERE acked = 0") == [(0,)],
            what="the outbox drained",
        )
        assert hub.of_kind(MailSent) == []
        assert len(hub.welcomes) == 1
    [(source, reason, data)] = dep.query("SELECT source, reason, data FROM dead_letter")
    assert source == "outbox" and reason.startswith("unshippable: a frame of ")
    assert f"over NATS' {WIRE_MAX_PAYLOAD}" in reason
    assert data == encode(huge)
    assert dep.query("SELECT count(*) FROM outbox WHERE acked = 0") == [(0,)]


@pytest.mark.slow  # waits out request timeouts
@pytest.mark.anyio
async def test_events_the_hub_does_not_answer_are_resent_without_saying_hello(
    tmp_path: Path,
) -> None:
    dep = sized(tmp_path)
    async with deployed_sidecar(dep, request_timeout=0.2, drop_acks=4) as (hub, _):
        await hub.deliver(mail(dep, 1, "ok"))
        # Acknowledged at last: the events left the outbox, the envelope its body.
        await wait_for(lambda: dep.query(APPLIED) == [(1, 0)], what="the events acknowledged")
        assert hub.batches == 5
        # A hello cannot make a frame arrive: the session stands.
        assert len(hub.welcomes) == 1


@pytest.mark.anyio
async def test_events_a_reply_leaves_out_are_sent_again(tmp_path: Path) -> None:
    dep = sized(tmp_path)
    async with deployed_sidecar(dep, partial_acks=1) as (hub, _):
        await hub.deliver(mail(dep, 1, "ok"))
        # The first frame's reply names one of its events: the rest go again,
        # and the outbox drains.
        await wait_for(lambda: dep.query(APPLIED) == [(1, 0)], what="the events acknowledged")
        assert hub.batches >= 2 and hub.partial_acks == 0


@pytest.mark.slow  # counts hellos over seconds
@pytest.mark.anyio
async def test_a_session_refused_again_and_again_is_not_a_hello_storm(tmp_path: Path) -> None:
    dep = sized(tmp_path)
    refusals: Any = ["unknown_session"] * 1000
    async with deployed_sidecar(dep, refuse_events=refusals) as (hub, _):
        await hub.deliver(mail(dep, 1, "ok"))
        started = anyio.current_time()
        await wait_for(lambda: len(hub.welcomes) >= 7, timeout=20)
        elapsed = anyio.current_time() - started
    # Each refusal asks for a hello; they come no faster than the link's
    # backoff (0.05 s doubling, jittered down to half): at least
    # (0.05 + 0.1 + 0.2 + 0.4 + 0.8) / 2 s for six of them, not a hello per
    # millisecond.
    assert elapsed >= 0.7, elapsed
