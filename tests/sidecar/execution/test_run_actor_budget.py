"""A run actor stopped past its restart budget: the batch its scheduler
handed it (``ActorRef.ask_nowait``, settled in a done-callback) is refused
with :class:`~runtime.errors.ActorStopped` and settled, never left in
flight; the run's next batch goes to a fresh actor, and once what broke the
actors is mended the item is processed."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from runtime import new_id
from runtime.wire import FailurePolicy
from sidecar import Inbox
from sidecar.execution import Runs
from sidecar.storage import Envelope
from tests.support import wait_for
from tests.support.harnesses.sidecar import FAST_RUNS

pytestmark = pytest.mark.anyio

RUN = "run_a"


def env(seq: int) -> Envelope:
    return Envelope(dispatch_id=new_id("dsp"), run_id=RUN, seq=seq, subject=f"s{seq}")


async def processed(inbox: Inbox) -> set[int]:
    rows = await inbox.db.read(
        lambda conn: conn.execute("SELECT seq FROM inbox WHERE outcome IS NOT NULL").fetchall()
    )
    return {seq for (seq,) in rows}


def logged(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


async def test_a_batch_whose_run_actor_gave_up_is_settled_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    handled: list[int] = []

    async def handler(ctx: Any, item: Any) -> None:
        handled.append(item.seq)

    policy = FailurePolicy(handler_timeout=30.0)  # a batch's ask would wait some 2 hours
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        await inbox.store([env(1)])
        async with Runs(
            inbox=inbox, deployment_id="dep_x", handler=handler, config=FAST_RUNS
        ) as runs:
            await runs.set_policy(policy)
            runs.kick()
            await wait_for(lambda: inbox.last_seq == 1, what="the run's first item")
        # The run's stored row is unreadable now: each actor for it fails to start.
        await inbox.db.transact(
            lambda conn: conn.execute(
                "UPDATE run SET approvals = '[not json' WHERE run_id = ?", (RUN,)
            )
        )
        await inbox.store([env(2)])
        async with Runs(
            inbox=inbox, deployment_id="dep_x", handler=handler, config=FAST_RUNS
        ) as runs:
            await runs.set_policy(policy)
            runs.kick()
            # A second actor gave up too: the first one's batch was settled,
            # not left in flight until its ask timed out.
            await wait_for(
                lambda: logged(caplog, "gave up after repeated crashes") >= 2,
                what="a fresh actor after the first gave up",
            )
            assert logged(caplog, "its actor stopped; starting another") >= 1
            assert handled == [1]
            await inbox.db.transact(
                lambda conn: conn.execute(
                    "UPDATE run SET approvals = NULL WHERE run_id = ?", (RUN,)
                )
            )
            await wait_for(lambda: inbox.last_seq == 2, what="the item, once its run can be read")
        assert handled == [1, 2]
        assert await processed(inbox) == {1, 2}
    finally:
        await inbox.aclose()
