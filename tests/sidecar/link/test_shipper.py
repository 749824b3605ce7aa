"""The events' way back: frames read from the outbox, one in flight, in order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from runtime import DispatchProcessed, RunStarted
from sidecar.storage import Outgoing
from tests.support import wait_for
from tests.support.harnesses.sidecar import (
    APPLIED,
    Deployment,
    FakeHub,
    deployed_sidecar,
    mail,
    make_deployment,
)

# slow: every test runs 300 mails through a sidecar
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MAILS = 300  # after the first: more than one frame's worth of events


@asynccontextmanager
async def _a_full_frame_held(tmp_path: Path) -> AsyncIterator[tuple[FakeHub, Deployment]]:
    """Mail 1's frame held at the hub while 300 more are processed, then let
    through; yields while the next frame (full) is held at the hub, once the
    shipper has read on past it; answers it on leaving, and waits until
    every event is acknowledged."""
    dep = make_deployment(tmp_path)
    first, second = anyio.Event(), anyio.Event()
    holds = {1: first, 2: second}
    async with deployed_sidecar(dep, request_timeout=30.0, holds=holds) as (hub, car):
        reads: list[int] = []  # the outbox position each read starts after
        assert car.inbox is not None
        unacked = car.inbox.unacked

        async def spy(limit: int, *, after: int = 0) -> list[tuple[int, Outgoing]]:
            reads.append(after)
            return await unacked(limit, after=after)

        car.inbox.unacked = spy  # type: ignore[method-assign]
        await hub.deliver(mail(dep, 1, "one"))
        await hub.wait_events(DispatchProcessed, 1)  # its frame is out, held
        for at in range(2, MAILS + 2, 100):
            await hub.deliver_batch([mail(dep, seq, f"m{seq}") for seq in range(at, at + 100)])
        await wait_for(
            lambda: dep.query("SELECT count(*) FROM outbox") == [(2 + MAILS,)],
            what="every mail processed",
        )
        first.set()
        # The second frame is full and held at the hub: the shipper reads on
        # after its last event, without waiting for the answer.
        await wait_for(lambda: len({r for r in reads if r > 0}) >= 2, what="a read ahead")
        assert hub.batches == 2
        yield hub, dep
        second.set()
        await wait_for(lambda: dep.query(APPLIED) == [(1 + MAILS, 0)], what="all acknowledged")


async def test_while_a_full_frame_is_out_the_next_one_is_read(tmp_path: Path) -> None:
    async with _a_full_frame_held(tmp_path) as (hub, _):
        pass
    assert [e.seq for e in hub.of_kind(DispatchProcessed)] == list(range(1, MAILS + 2))
    assert len(hub.of_kind(RunStarted)) == 1
    # Each frame takes up where the one before ended: none twice, none skipped.
    sent = [event for frame in hub.frames for event in frame]
    assert len(sent) == len(set(sent)) == 2 + MAILS


async def test_a_frame_read_ahead_is_dropped_when_the_one_out_is_not_acknowledged_whole(
    tmp_path: Path,
) -> None:
    async with _a_full_frame_held(tmp_path) as (hub, _):
        hub.partial_acks = 1  # the held frame's reply names its first event only
    # What the reply left out went again, from the oldest event not marked
    # acknowledged yet: not the frame read ahead.
    resent, left_out = hub.frames[2], hub.frames[1][1]
    assert left_out in resent
    assert set(resent[: resent.index(left_out)]) <= {*hub.frames[0], *hub.frames[1]}
    assert [e.seq for e in hub.of_kind(DispatchProcessed)] == list(range(1, MAILS + 2))
