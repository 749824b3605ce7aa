"""A stopping hub ends the long polls of ``GET /workflows/wakes`` at once.

`mailrun up` (and the fault tests' cluster) keeps one such poll open at all
times, waiting up to 30 s for an asleep deployment to have work. A hub that
left it waiting held its HTTP server's graceful stop for the whole grace
(2 s) and then cut the poll off: every orderly stop of a hub with a waker
took 2 s more than its work. On a real hub (``serve_hub``: its wire side on
an in-memory bus) a poll in flight, and one that comes after the stop
began, answer at once, naming nothing."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from hub import HubSettings, serve_hub
from hub.wire import Wire, run_wire
from runtime.testing import MemoryBus

pytestmark = pytest.mark.anyio

TOKEN = "admin-token-of-the-stopping-polls-test-01"

ANSWERED_WITHIN = 20.0
"""Seconds for a poll's answer once the hub stops: at once, with room for a
loaded machine; the poll itself would wait 30 s (``MAX_WAIT``)."""


async def test_a_stopping_hub_answers_the_wakes_polls_at_once(tmp_path: Path) -> None:
    sides: list[Wire] = []

    async def wire(*, task_status: anyio.abc.TaskStatus[Wire], **kwargs: Any) -> None:
        # The hub's own wire side, kept at hand to poll it as the route does.
        async with anyio.create_task_group() as tg:
            side: Wire = await tg.start(partial(run_wire, **kwargs))
            sides.append(side)
            task_status.started(side)

    answers: list[tuple[str, list[str]]] = []

    async def poll(side: Wire, name: str) -> None:
        with anyio.fail_after(ANSWERED_WITHIN):
            found, _ = await side.wakes_after(30.0, None)
        answers.append((name, found))

    config = HubSettings(state_dir=tmp_path, http_port=0, admin_token=TOKEN)
    bus = MemoryBus()
    async with anyio.create_task_group() as polls:
        async with anyio.create_task_group() as hub:
            await hub.start(partial(serve_hub, config, transport=bus.connect("hub"), wire=wire))
            [side] = sides
            polls.start_soon(poll, side, "in flight")
            await anyio.wait_all_tasks_blocked()  # the poll is waiting in the hub
            assert answers == []
            hub.cancel_scope.cancel()
        # Stopped: a poll that comes now is not kept waiting either.
        polls.start_soon(poll, side, "after the stop")
    assert sorted(answers) == [("after the stop", []), ("in flight", [])]
