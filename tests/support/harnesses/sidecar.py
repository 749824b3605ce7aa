"""A scripted hub on a transport, restore records on disk, and a running Sidecar,
for the sidecar's unit tests (tests/sidecar/)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec

from runtime import (
    Ack,
    AckBatch,
    Backoff,
    BlobChunk,
    BlobGet,
    Challenge,
    Claim,
    Event,
    EventsAck,
    FrameDecoder,
    Hello,
    HubBoot,
    MailBatch,
    MailInbound,
    MintChild,
    Minted,
    Refused,
    RestoreRecord,
    RunEvents,
    RunSnapshot,
    RunStates,
    Sources,
    StateGet,
    Subjects,
    Transport,
    Welcome,
    encode,
    hello_message,
    new_id,
    record_path,
    write_restore_record,
)
from runtime.actors import RestartPolicy
from runtime.sidecar_contract import HubKey
from runtime.testing import MemoryBus
from runtime.wire import FailurePolicy, OnFailure, generate_keypair, verify
from sidecar import RunsConfig, Sidecar, SidecarOptions
from sidecar._app import Connect

from ..waiting import wait_for

RECORDER = """
import hashlib

import anyio

CALLS = {"flaky": 0}


async def main(ctx, item):
    if item.subject == "poison":
        raise ValueError("poisoned mail")
    if item.subject == "not-json":
        ctx.state["bad"] = object()
        return
    seen = ctx.state.setdefault("seen", [])
    # Big bodies only by size: ctx.state is limited (runtime.wire.MAX_STATE).
    text = item.text if len(item.body) <= 1024 else None
    seen.append({"subject": item.subject, "text": text, "seq": item.seq,
                 "kind": item.kind, "size": len(item.body), "run_id": item.run_id})
    if getattr(item, "raw", None) is not None:  # a message that came over SMTP
        seen[-1]["raw"] = hashlib.sha256(item.raw).hexdigest()
    if item.subject == "flaky" and CALLS["flaky"] == 0:
        CALLS["flaky"] += 1
        raise RuntimeError("flaky once")
    if item.subject == "send":
        ctx.send("someone@example.org", "hello", item.body)
    if item.subject == "stop":
        ctx.complete({"count": len(seen)})
"""


# For Deployment.query: envelopes whose body is gone (the hub applied them),
# and events not acknowledged.
APPLIED = (
    "SELECT (SELECT count(*) FROM inbox WHERE length(envelope) = 0), (SELECT count(*) FROM outbox)"
)


@dataclass
class Deployment:
    id: str
    address: str
    seed: str
    public_key: str
    state_dir: Path

    @property
    def record_file(self) -> Path:
        return record_path(self.state_dir, self.id)

    @property
    def inbox_file(self) -> Path:
        return self.record_file.parent / "inbox.db"

    def query(self, sql: str, *params: Any) -> list[Any]:
        db = sqlite3.connect(self.inbox_file)
        try:
            return db.execute(sql, params).fetchall()
        finally:
            db.close()


def v1_inbox(
    dep: Deployment,
    envelopes: list[tuple[dict[str, Any], str]],
    state: dict[str, Any] | None = None,
) -> None:
    """An inbox.db exactly as release 1 left it (docs/design.md section 6)."""
    dep.inbox_file.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(dep.inbox_file)
    db.executescript(
        "CREATE TABLE inbox (dispatch_id TEXT PRIMARY KEY, envelope BLOB NOT NULL,"
        " state TEXT NOT NULL);"
        "CREATE TABLE run_state (run_id TEXT PRIMARY KEY, state BLOB NOT NULL);"
    )
    for envelope, status in envelopes:
        db.execute(
            "INSERT INTO inbox VALUES (?, ?, ?)",
            (envelope["dispatch_id"], msgspec.msgpack.encode(envelope), status),
        )
    if state is not None:
        db.execute(
            "INSERT INTO run_state VALUES (?, ?)", (dep.address, msgspec.msgpack.encode(state))
        )
    db.commit()
    db.close()


def v1_envelope(dep: Deployment, subject: str, body: bytes = b"") -> dict[str, Any]:
    return {
        "v": 1,
        "dispatch_id": new_id("dsp"),
        "deployment_id": dep.id,
        "address": dep.address,
        "kind": "mail",
        "message_id": None,
        "sender": "old@example.org",
        "subject": subject,
        "body": body,
    }


def make_deployment(state_dir: Path, *, source: str = RECORDER, version: int = 2) -> Deployment:
    """Write a restore record (format ``version``) for a fresh deployment."""
    seed, public_key = generate_keypair()
    dep = Deployment(new_id("dep"), "flow@mailrun.local", seed, public_key, state_dir)
    sources = Sources(entrypoint="flow:main", files={"flow.py": source})
    if version == 2:
        record = RestoreRecord(
            deployment_id=dep.id,
            address=dep.address,
            hub_key=HubKey(seed=seed),
            sources=sources,
            nats_url="nats://127.0.0.1:1",
        )
        write_restore_record(dep.record_file, record)
    else:
        dep.record_file.parent.mkdir(parents=True)
        v1 = {
            "deployment": {
                "deployment_id": dep.id,
                "address": dep.address,
                "session_id": new_id("ses"),
                "deployment_key": seed,
                "sources": msgspec.to_builtins(sources),
                "nats_url": "nats://127.0.0.1:1",
            }
        }
        dep.record_file.write_text(json.dumps(v1))
        dep.record_file.chmod(0o644)
    return dep


def mail(
    dep: Deployment, seq: int | None, subject: str = "", body: bytes | None = b"", **kw: Any
) -> MailInbound:
    fields: dict[str, Any] = {
        "dispatch_id": new_id("dsp"),
        "deployment_id": dep.id,
        "run_id": kw.pop("run_id", None),
        "address": dep.address,
        "seq": seq,
        "subject": subject,
        "body": body,
        "sender": "sender@example.org",
        "owner_epoch": 1,
    }
    fields.update(kw)
    return MailInbound(**fields)


_HELLO: FrameDecoder[Hello] = FrameDecoder(Hello)
_RUNEVENTS: FrameDecoder[RunEvents] = FrameDecoder(RunEvents)
_BLOBGET: FrameDecoder[BlobGet] = FrameDecoder(BlobGet)
_MINTCHILD: FrameDecoder[MintChild] = FrameDecoder(MintChild)
_STATEGET: FrameDecoder[StateGet] = FrameDecoder(StateGet)


@dataclass
class FakeHub:
    """Answers hello/events/blob/mint like the hub, and records what it saw."""

    transport: Transport
    dep: Deployment
    subjects: Subjects = field(default_factory=Subjects)
    boot_id: str = field(default_factory=lambda: new_id("boot"))
    epoch: int = 1
    floor_seq: int = 0
    events_floor: int = 0
    """The ``floor_seq`` every EventsAck claims."""
    refuse_hello: str | None = None
    drop_acks: int = 0
    partial_acks: int = 0
    """Frames answered with an EventsAck naming only their first event."""
    holds: dict[int, anyio.Event] = field(default_factory=dict)
    """The n-th RunEvents frame (from 1) is answered once its event is set."""
    refuse_events: list[str] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)
    corrupt_blobs: bool = False
    chunk_size: int = 64 * 1024
    hellos: list[Hello] = field(default_factory=list)
    welcomes: list[Welcome] = field(default_factory=list)
    events: dict[str, Event] = field(default_factory=dict)
    frame_sizes: list[int] = field(default_factory=list)
    """The size of every RunEvents frame that came in, in order."""
    frames: list[list[str]] = field(default_factory=list)
    """The event ids of every RunEvents frame that came in, in order."""
    minted: dict[str, str] = field(default_factory=dict)
    from_hub: int = 0
    """How many welcomes (the next ones) say ``from_hub``."""
    states: list[RunSnapshot] = field(default_factory=list)
    settled: list[int] = field(default_factory=list)
    refuse_state: int = 0
    """How many ``hub.state`` requests (the next ones) are refused."""
    policy: FailurePolicy | None = field(default_factory=lambda: FAST_POLICY)
    """The failure policy every Welcome carries (None: as an older hub, none)."""
    silent_hellos: bool = False
    """Hellos are recorded, never answered (a hub too busy, or an answer a
    revocation cut off)."""

    @property
    def batches(self) -> int:
        """How many RunEvents frames came in."""
        return len(self.frames)

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        # The sidecar asks on its deployment's own request subjects.
        own = Subjects(self.subjects.prefix, deployment_id=self.dep.id)
        handlers: list[tuple[str, Callable[[bytes], Awaitable[Any]]]] = [
            (own.hello, self._hello),
            (own.events, self._events),
            (own.blob, self._blob),
            (own.mint, self._mint),
            (own.state, self._state),
        ]
        async with anyio.create_task_group() as tg:
            for subject, handler in handlers:
                sub = await self.transport.subscribe(subject)
                tg.start_soon(self._loop, sub, handler)
            task_status.started()

    async def _loop(self, sub: Any, handler: Callable[[bytes], Awaitable[Any]]) -> None:
        async for message in sub:
            reply = await handler(message.data)
            if reply is not None:
                await message.respond(encode(reply))

    async def _hello(self, data: bytes) -> Any:
        hello = _HELLO.decode(data)
        self.hellos.append(hello)
        if self.silent_hellos:
            return None
        if hello.nonce is None:
            return Challenge(nonce=new_id("ses"))
        verify(
            self.dep.public_key,
            hello_message(hello.nonce, hello.deployment_id, hello.instance_id),
            hello.signature or b"",
        )
        if self.refuse_hello is not None:
            return Refused(reason=self.refuse_hello)
        welcome = Welcome(
            session_id=new_id("ses"),
            owner_epoch=self.epoch,
            hub_boot_id=self.boot_id,
            floor_seq=self.floor_seq,
            from_hub=self.from_hub > 0,
            policy=self.policy,
        )
        self.from_hub = max(0, self.from_hub - 1)
        self.welcomes.append(welcome)
        return welcome

    async def _events(self, data: bytes) -> Any:
        frame = _RUNEVENTS.decode(data)
        self.frame_sizes.append(len(data))
        self.frames.append([e.event_id for e in frame.events])
        if self.refuse_events:
            return Refused(reason=self.refuse_events.pop(0))
        assert frame.session_id in {w.session_id for w in self.welcomes}
        for event in frame.events:
            self.events.setdefault(event.event_id, event)
        hold = self.holds.get(self.batches)
        if hold is not None:
            await hold.wait()
        if self.drop_acks > 0:
            self.drop_acks -= 1
            return None
        if self.partial_acks > 0:
            self.partial_acks -= 1
            return EventsAck(ids=[frame.events[0].event_id], floor_seq=self.events_floor)
        return EventsAck(ids=[e.event_id for e in frame.events], floor_seq=self.events_floor)

    async def _blob(self, data: bytes) -> Any:
        get = _BLOBGET.decode(data)
        blob = self.blobs.get(get.digest)
        if blob is None:
            return Refused(reason="unknown_blob")
        chunk = blob[get.offset : get.offset + self.chunk_size]
        if self.corrupt_blobs and get.offset == 0:
            chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
        return BlobChunk(digest=get.digest, offset=get.offset, size=len(blob), data=chunk)

    async def _state(self, data: bytes) -> Any:
        get = _STATEGET.decode(data)
        assert get.session_id in {w.session_id for w in self.welcomes}
        if self.refuse_state > 0:
            self.refuse_state -= 1
            return Refused(reason="store_unavailable")
        return RunStates(runs=self.states, floor_seq=self.floor_seq, settled=self.settled)

    async def _mint(self, data: bytes) -> Any:
        mint = _MINTCHILD.decode(data)
        return Minted(run_id=self.minted.setdefault(mint.request_id, new_id("run")))

    def claim(self, body: bytes) -> Claim:
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        self.blobs[digest] = body
        return Claim(digest=digest, size=len(body))

    async def deliver(self, frame: MailInbound | bytes, timeout: float = 5.0) -> Ack:
        """Send ``frame`` as the hub does: a MailInbound without a session id is
        stamped with the latest welcome's, as the hub stamps every one."""
        if isinstance(frame, MailInbound) and frame.session_id is None and self.welcomes:
            frame = msgspec.structs.replace(frame, session_id=self.welcomes[-1].session_id)
        data = frame if isinstance(frame, bytes) else encode(frame)
        reply = await self.transport.request(self.subjects.inbound(self.dep.id), data, timeout)
        return FrameDecoder(Ack).decode(reply)

    async def deliver_batch(self, frames: list[MailInbound], timeout: float = 5.0) -> AckBatch:
        """``frames`` in one MailBatch, stamped as :meth:`deliver` stamps one."""
        if self.welcomes:
            session = self.welcomes[-1].session_id
            frames = [
                f if f.session_id is not None else msgspec.structs.replace(f, session_id=session)
                for f in frames
            ]
        data = encode(MailBatch(items=frames))
        reply = await self.transport.request(self.subjects.inbound(self.dep.id), data, timeout)
        return FrameDecoder(AckBatch).decode(reply)

    async def announce(self, boot_id: str) -> None:
        self.boot_id = boot_id
        await self.transport.publish(self.subjects.announce, encode(HubBoot(boot_id=boot_id)))

    def of_kind(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events.values() if isinstance(e, kind)]

    async def wait_events(self, kind: type[Any], count: int) -> None:
        """Until exactly ``count`` events of ``kind`` have come in."""
        await wait_for(
            lambda: len(self.of_kind(kind)) == count, what=f"{count} {kind.__name__} events"
        )


def bus_connect(bus: MemoryBus) -> Connect:
    """A Sidecar's ``connect`` onto ``bus`` (credentials are the server's
    business; the reply inbox prefix is kept, as NATS keeps it)."""

    def connect(
        url: str, name: str, *, seed: str | None, inbox_prefix: str
    ) -> AbstractAsyncContextManager[Transport]:
        return bus.connect(name, inbox_prefix=inbox_prefix)

    return connect


FAST_RUNS = RunsConfig(
    policy=RestartPolicy(max_restarts=2, window=60.0, backoff=Backoff(0.01, 0.05)),
    stop_grace=0.5,
)

FAST_POLICY = FailurePolicy(
    on_failure=OnFailure.FAIL, max_attempts=3, max_backoff=0.05, handler_timeout=5.0
)
"""What a FakeHub gives by default: today's outcome (the run fails), soon."""


@asynccontextmanager
async def running_sidecar(
    bus: MemoryBus,
    dep: Deployment,
    *,
    takeover: bool = False,
    request_timeout: float = 2.0,
    wait_session: bool = True,
    runs: RunsConfig = FAST_RUNS,
) -> AsyncIterator[Sidecar]:
    """A Sidecar on ``bus``, stopped in order on exit (like SIGTERM)."""
    options = SidecarOptions(
        state_dir=dep.state_dir,
        deployment_id=dep.id,
        takeover=takeover,
        runs=runs,
        hello_timeout=1.0,
        request_timeout=request_timeout,
    )
    car = Sidecar(options, connect=bus_connect(bus))
    async with anyio.create_task_group() as tg:
        tg.start_soon(car.run)
        with anyio.fail_after(5):
            await car.started.wait()
        if wait_session:
            await wait_for(lambda: car.link is not None and car.link.session is not None)
        yield car
        car.stop()  # what SIGTERM does; the task group waits for run() to return


@asynccontextmanager
async def fake_hub_on(transport: Transport, dep: Deployment, **kw: Any) -> AsyncIterator[FakeHub]:
    """A FakeHub (``kw``: its fields) serving on ``transport`` until the block ends."""
    async with anyio.create_task_group() as tg:
        hub = FakeHub(transport, dep, **kw)
        await tg.start(hub.serve)
        yield hub
        tg.cancel_scope.cancel()


@asynccontextmanager
async def fake_hub(bus: MemoryBus, dep: Deployment, **kw: Any) -> AsyncIterator[FakeHub]:
    """A FakeHub on its own connection to ``bus``."""
    async with bus.connect("hub") as transport, fake_hub_on(transport, dep, **kw) as hub:
        yield hub


@asynccontextmanager
async def deployed_sidecar(
    dep: Deployment,
    *,
    takeover: bool = False,
    request_timeout: float = 2.0,
    runs: RunsConfig = FAST_RUNS,
    **hub: Any,
) -> AsyncIterator[tuple[FakeHub, Sidecar]]:
    """``dep``'s Sidecar (``runs``: its run settings) in session with a
    FakeHub (``hub``: its fields) on a fresh in-memory bus: the setup most
    sidecar tests share. Yields both."""
    bus = MemoryBus()
    async with (
        fake_hub(bus, dep, **hub) as fake,
        running_sidecar(
            bus, dep, takeover=takeover, request_timeout=request_timeout, runs=runs
        ) as car,
    ):
        yield fake, car
