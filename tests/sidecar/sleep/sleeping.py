"""What the scale-to-zero tests of the sidecar share: a stub answering
``hub.sleep.<dep>`` beside the scripted hub of tests/support/harnesses/sidecar.py, and
a Sidecar with an idle time on a real nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from runtime import (
    Asleep,
    DispatchProcessed,
    FrameDecoder,
    Sleep,
    Subjects,
    Transport,
    encode,
    open_nats,
)
from sidecar import Sidecar, SidecarOptions
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.sidecar import (
    FAST_RUNS,
    Deployment,
    FakeHub,
    fake_hub_on,
)

IDLE = 0.3
"""The idle time of these tests' sidecars (seconds)."""


@dataclass
class SleepDesk:
    """Answers ``hub.sleep.<dep>`` from a script (Asleep once it runs out),
    and keeps what each ask found (``look``, called as it comes in)."""

    transport: Transport
    dep: Deployment
    answers: list[Any] = field(default_factory=list)
    look: Callable[[], Any] = lambda: None
    hold: anyio.Event | None = None
    """The next answer waits for it (then it is dropped)."""
    asks: list[Sleep] = field(default_factory=list)
    seen: list[Any] = field(default_factory=list)
    """What ``look`` returned at each ask."""

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        decoder: FrameDecoder[Sleep] = FrameDecoder(Sleep)
        subject = Subjects(deployment_id=self.dep.id).sleep
        sub = await self.transport.subscribe(subject)
        task_status.started()
        async for message in sub:
            self.asks.append(decoder.decode(message.data))
            self.seen.append(self.look())
            if self.hold is not None:
                await self.hold.wait()
                self.hold = None
            answer = self.answers.pop(0) if self.answers else Asleep(deployment_id=self.dep.id)
            await message.respond(encode(answer))


@asynccontextmanager
async def hub_and_desk(
    nats: NatsServerProcess, dep: Deployment, **hub: Any
) -> AsyncIterator[tuple[FakeHub, SleepDesk]]:
    async with (
        open_nats(nats.url, name="fake hub") as transport,
        fake_hub_on(transport, dep, **hub) as fake,
        anyio.create_task_group() as tg,
    ):
        desk = SleepDesk(transport, dep)
        await tg.start(desk.serve)
        yield fake, desk
        tg.cancel_scope.cancel()


@asynccontextmanager
async def serving(
    nats: NatsServerProcess,
    dep: Deployment,
    *,
    idle_stop: float = IDLE,
    connect: Any = None,
    **kw: Any,
) -> AsyncIterator[tuple[Sidecar, anyio.Event]]:
    """``dep``'s Sidecar on the real server (through ``connect``, if given),
    in session; the event is set when its ``run`` has returned (an Asleep
    stops it by itself)."""
    options = SidecarOptions(
        state_dir=dep.state_dir,
        deployment_id=dep.id,
        nats_url=nats.url,
        runs=FAST_RUNS,
        idle_stop=idle_stop,
        **kw,
    )
    car = Sidecar(options, connect=connect)
    ended = anyio.Event()

    async def run() -> None:
        try:
            await car.run()
        finally:
            ended.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await wait_for(lambda: car.link is not None and car.link.session is not None)
        yield car, ended
        car.stop()


def processed(hub: FakeHub) -> int:
    return len(hub.of_kind(DispatchProcessed))


def idle_for(car: Sidecar) -> float:
    """Seconds since the sidecar's last work ended (its ask itself is work
    still in progress while the desk looks)."""
    assert car.link is not None
    return anyio.current_time() - car.link.activity.last


def inbox_ids(dep: Deployment) -> set[str]:
    return {row[0] for row in dep.query("SELECT dispatch_id FROM inbox")}


@dataclass
class HeldSleeps:
    """Opens the sidecar's real NATS connection, whose Sleep requests wait
    for ``release`` before they go out (``held`` is set when one waits): the
    hub's answer comes only after what the test does meanwhile."""

    held: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)

    @asynccontextmanager
    async def __call__(
        self, url: str, name: str, *, seed: str | None, inbox_prefix: str
    ) -> AsyncIterator[Transport]:
        async with open_nats(url, name=name, seed=seed, inbox_prefix=inbox_prefix) as transport:
            yield _Holding(transport, self)


class _Holding:
    def __init__(self, inner: Transport, gate: HeldSleeps) -> None:
        self._inner = inner
        self._gate = gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def request(self, subject: str, data: bytes, timeout: float) -> bytes:
        if ".hub.sleep." in subject:
            self._gate.held.set()
            await self._gate.release.wait()
        return await self._inner.request(subject, data, timeout)
