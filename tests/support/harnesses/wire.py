"""A hub wire side on an in-memory bus, and a scripted sidecar to talk to it."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup

from hub.metrics import HubMetrics
from hub.store import Accepted, Store, Trigger, accept_triggers, create_deployment, open_store
from hub.wire.events import OutboundSink
from hub.wire.service import Wire, WireConfig, run_wire
from runtime import (
    Ack,
    AckBatch,
    Challenge,
    DispatchProcessed,
    Event,
    Fenced,
    FrameDecoder,
    Hello,
    LoadVersion,
    MailBatch,
    MailInbound,
    Ping,
    Pong,
    Refused,
    RunEvents,
    Subjects,
    Transport,
    VersionLoaded,
    Welcome,
    encode,
    hello_message,
    new_id,
)
from runtime.sidecar_contract import decode_restore_record, record_path, write_restore_record
from runtime.testing import MemoryBus
from runtime.wire import SUPPORTED_FORMATS, Frame, sign, unb64url
from tests.support.harnesses.sidecar import Deployment
from tests.support.store import read_all, read_one


@dataclass
class Hub:
    store: Store
    bus: MemoryBus
    transport: Transport
    subjects: Subjects
    wire: Wire
    boot_id: str
    metrics: HubMetrics = field(default_factory=HubMetrics)
    """What the wire counted (``GET /metrics``'s per-deployment series)."""

    # On the hub's own reader, as its reads are.
    async def one(self, sql: str, *params: Any) -> Any:
        return await read_one(self.store, sql, *params)

    async def all(self, sql: str, *params: Any) -> list[Any]:
        return await read_all(self.store, sql, *params)


@asynccontextmanager
async def running_hub(
    tmp_path: Path,
    *,
    config: WireConfig | None = None,
    bus: MemoryBus | None = None,
    transport: Transport | None = None,
    outbox: OutboundSink | None = None,
    wrap: Callable[[Store], Store] | None = None,
) -> AsyncIterator[Hub]:
    """The wire side on ``transport`` (default: a connection to ``bus``);
    outgoing mail to ``outbox`` (default: none, kept as no_relay); ``wrap``:
    what the wire uses in place of the store (one that counts its calls)."""
    store = await open_store(tmp_path / "hub.db")
    if wrap is not None:
        store = wrap(store)
    bus = bus or MemoryBus()
    transport = transport or bus.connect("hub")
    subjects = Subjects()
    boot_id = new_id("boot")
    metrics = HubMetrics()
    try:
        async with anyio.create_task_group() as tg:
            wire = await tg.start(
                functools.partial(
                    run_wire,
                    store=store,
                    transport=transport,
                    subjects=subjects,
                    boot_id=boot_id,
                    config=config,
                    outbox=outbox,
                    metrics=metrics,
                )
            )
            yield Hub(store, bus, transport, subjects, wire, boot_id, metrics)
            tg.cancel_scope.cancel()
    finally:
        await transport.aclose()
        await store.aclose()


@dataclass
class Dep:
    id: str
    address: str
    seed: str
    public_key: str


async def deploy(store: Store, name: str = "flow") -> Dep:
    created = await create_deployment(
        store,
        name=name,
        source="async def main(ctx, item):\n    pass\n",
        domain="mailrun.local",
        nats_url="nats://127.0.0.1:4222",
        subject_prefix="mailrun",
    )
    record, _ = decode_restore_record(unb64url(created.join_token))
    assert record.public_key is not None
    return Dep(created.deployment_id, record.address, record.hub_key.seed, record.public_key)


async def joined(hub: Hub, nats_url: str, state: Path, source: str) -> tuple[Deployment, Dep]:
    """A deployment of ``source`` created in ``hub``'s store, its join token's
    restore record written in ``state`` (where ``python -m sidecar --state-dir``
    finds it): the deployment as the sidecar's tests and the hub's see it."""
    created = await create_deployment(
        hub.store,
        name="flow",
        source=source,
        domain="mailrun.local",
        nats_url=nats_url,
        subject_prefix="mailrun",
    )
    record, _ = decode_restore_record(unb64url(created.join_token))
    write_restore_record(record_path(state, record.deployment_id), record)
    assert record.public_key is not None
    dep = Deployment(
        record.deployment_id, record.address, record.hub_key.seed, record.public_key, state
    )
    return dep, Dep(dep.id, dep.address, dep.seed, dep.public_key)


async def accept(
    hub: Hub, dep: Dep, bodies: list[bytes], *, raw: bytes | None = None
) -> list[Accepted]:
    """Accept a mail per body, each with the raw message ``raw`` if given."""
    triggers = [
        Trigger(address=dep.address, subject=f"m{i}", sender="a@b.c", body=body, raw=raw)
        for i, body in enumerate(bodies)
    ]
    outcomes, woken = await hub.store.transact(partial(accept_triggers, triggers=triggers))
    hub.wire.on_accepted(woken)
    receipts = [o for o in outcomes if isinstance(o, Accepted)]
    assert len(receipts) == len(bodies), outcomes
    return receipts


_reply = FrameDecoder()


@dataclass
class Sidecar:
    """Speaks the sidecar's side of the wire, one frame at a time."""

    hub: Hub
    dep: Dep
    transport: Transport | None = None  # default: a connection to the hub's bus
    instance_id: str = field(default_factory=lambda: new_id("ins"))
    home: str = ""  # "": a sidecar of an earlier release (its instance id stands for it)
    timeout: float = 5.0
    welcome: Welcome | None = None
    own: bool = False
    """Speak as this release's sidecar: on the deployment's own request
    subjects, with replies to its own inbox. False: as an earlier release's,
    on the shared subjects."""
    formats: tuple[int, ...] = SUPPORTED_FORMATS
    """What its hello lists: without 3 it gets single MailInbound frames."""

    def __post_init__(self) -> None:
        if self.transport is None:
            prefix = Subjects.inbox_prefix(self.dep.id) if self.own else "_INBOX"
            self.transport = self.hub.bus.connect(
                f"sidecar-{self.instance_id}", inbox_prefix=prefix
            )

    @property
    def subjects(self) -> Subjects:
        """The request subjects this sidecar asks on."""
        if self.own:
            return Subjects(self.hub.subjects.prefix, deployment_id=self.dep.id)
        return self.hub.subjects

    @property
    def bus(self) -> Transport:
        assert self.transport is not None
        return self.transport

    async def request(self, subject: str, frame: msgspec.Struct | bytes) -> Frame:
        data = frame if isinstance(frame, bytes) else encode(frame)
        return _reply.decode(await self.bus.request(subject, data, self.timeout))

    def _hello(self, **kw: Any) -> Hello:
        return Hello(
            deployment_id=self.dep.id,
            instance_id=self.instance_id,
            public_key=self.dep.public_key,
            home=self.home,
            formats=list(self.formats),
            **kw,
        )

    async def hello(self, *, takeover: bool = False, seed: str | None = None) -> Frame:
        challenge = await self.request(self.subjects.hello, self._hello())
        assert isinstance(challenge, Challenge), challenge
        message = hello_message(challenge.nonce, self.dep.id, self.instance_id)
        signature = sign(seed or self.dep.seed, message)
        reply = await self.request(
            self.subjects.hello,
            self._hello(nonce=challenge.nonce, signature=signature, takeover=takeover),
        )
        if isinstance(reply, Welcome):
            self.welcome = reply
        return reply

    @property
    def session(self) -> tuple[str, int]:
        assert self.welcome is not None
        return self.welcome.session_id, self.welcome.owner_epoch


@dataclass
class Inbox:
    """A fake sidecar inbox on ``mail.inbound.<dep>``: records every frame and
    answers it with ``answer(frame)`` (None: stay silent, as if lost); the
    items of a MailBatch likewise, with one AckBatch (silent if any item is);
    ``batches`` counts those. Health probes go to ``pings`` and are answered by
    ``ping_answer``."""

    frames: list[MailInbound] = field(default_factory=list)
    batches: int = 0
    answer: Callable[[MailInbound], Ack | None] = lambda f: Ack(
        dispatch_id=f.dispatch_id, result="stored"
    )
    pings: list[Ping] = field(default_factory=list)
    ping_answer: Callable[[Ping], Pong | None] = lambda p: Pong()
    notices: list[Fenced] = field(default_factory=list)
    loads: list[LoadVersion] = field(default_factory=list)
    load_answer: Callable[[LoadVersion], VersionLoaded | Ack | None] = lambda f: VersionLoaded(
        version=f.version
    )

    async def serve(
        self, sidecar: Sidecar, *, task_status: Any = anyio.TASK_STATUS_IGNORED
    ) -> None:
        decoder: FrameDecoder[MailInbound | MailBatch | Ping | LoadVersion | Fenced] = FrameDecoder(
            MailInbound | MailBatch | Ping | LoadVersion | Fenced
        )
        sub = await sidecar.bus.subscribe(sidecar.hub.subjects.inbound(sidecar.dep.id))
        task_status.started()
        async for message in sub:
            frame = decoder.decode(message.data)
            answer: Ack | AckBatch | Pong | VersionLoaded | None
            if isinstance(frame, MailBatch):
                self.batches += 1
                self.frames.extend(frame.items)
                acks = [self.answer(item) for item in frame.items]
                answered = [a for a in acks if a is not None]
                answer = AckBatch(acks=answered) if len(answered) == len(acks) else None
            elif isinstance(frame, Fenced):
                self.notices.append(frame)  # a notice: nothing to answer
                continue
            elif isinstance(frame, LoadVersion):
                self.loads.append(frame)
                answer = self.load_answer(frame)
            elif isinstance(frame, Ping):
                self.pings.append(frame)
                answer = self.ping_answer(frame)
            else:
                self.frames.append(frame)
                answer = self.answer(frame)
            if answer is not None:
                await message.respond(encode(answer))


def processed(receipt: Accepted, **fields: Any) -> DispatchProcessed:
    """The sidecar's report that it processed ``receipt``'s dispatch (a new
    event id; ``fields`` are the rest: state, step, version, at...)."""
    return DispatchProcessed(
        event_id=new_id("evt"),
        run_id=receipt.run_id,
        dispatch_id=receipt.dispatch_id,
        seq=receipt.seq,
        **fields,
    )


def refused(reply: Frame, reason: str) -> bool:
    return isinstance(reply, Refused) and reply.reason == reason


async def owned(hub: Hub, n: int = 0, name: str = "flow") -> tuple[Sidecar, list[Accepted]]:
    """A deployment with ``n`` mails accepted, and a Sidecar welcomed as its owner."""
    dep = await deploy(hub.store, name)
    receipts = await accept(hub, dep, [f"m{i}".encode() for i in range(n)])
    car = Sidecar(hub, dep)
    assert isinstance(await car.hello(), Welcome)
    return car, receipts


async def served(
    hub: Hub, tg: TaskGroup, bodies: Sequence[bytes] = (), **sidecar: Any
) -> tuple[Sidecar, Inbox, list[Accepted]]:
    """A deployment with a mail accepted per body (before its sidecar says
    hello), and a Sidecar (``sidecar``: its fields) whose Inbox serves in
    ``tg``, welcomed as the owner: its Welcome is ``car.welcome``."""
    dep = await deploy(hub.store)
    receipts = await accept(hub, dep, list(bodies)) if bodies else []
    car, inbox = Sidecar(hub, dep, **sidecar), Inbox()
    await tg.start(inbox.serve, car)
    assert isinstance(await car.hello(), Welcome)
    return car, inbox, receipts


async def send(car: Sidecar, *events: Event) -> Frame:
    """``events`` in one RunEvents frame of ``car``'s session; the hub's reply."""
    session_id, epoch = car.session
    frame = RunEvents(
        deployment_id=car.dep.id, session_id=session_id, owner_epoch=epoch, events=list(events)
    )
    return await car.request(car.subjects.events, frame)
