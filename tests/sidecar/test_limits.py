"""Size limits where the handler's effects are committed, and the shipper's frames.

A value over its limit fails its run at once with an error naming the limit
and the size, the envelope is consumed and later ones move on; events ship
in frames that fit a NATS message; an event that could not fit is set aside,
never resent forever.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import (
    MAX_EVENT,
    MAX_FRAME_BYTES,
    MAX_INPUT,
    MAX_MAIL,
    MAX_PROMPT,
    MAX_RESULT,
    MAX_STATE,
    ApprovalRequested,
    DispatchProcessed,
    MailSent,
    RunFailed,
    SizeLimit,
    clip_text,
    encoded_size,
)
from tests.support.sidecar import (
    Deployment,
    deployed_sidecar,
    mail,
    make_deployment,
)

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
        ctx.request_approval("x" * n)
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
