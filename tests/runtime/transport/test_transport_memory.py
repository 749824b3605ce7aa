"""The in-memory bus (runtime/testing/_memory.py): NATS semantics without a server."""

from __future__ import annotations

import anyio
import pytest

from runtime import WIRE_MAX_PAYLOAD, TransportError
from runtime.errors import NoResponders, RequestTimeout, TransportClosed
from runtime.testing import MemoryBus
from runtime.testing._memory import MemorySubscription
from runtime.transport import subject_matches, validate_subject
from tests.support.harnesses.transport import echo, take


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("a.b", "a.b", True),
        ("a.b", "a.b.c", False),
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),
        ("a.*.c", "a.b.c", True),
        ("a.>", "a.b", True),
        ("a.>", "a.b.c", True),
        ("a.>", "a", False),
        (">", "a", True),
        ("*", "a.b", False),
    ],
)
def test_subject_matching(pattern: str, subject: str, expected: bool) -> None:
    assert subject_matches(pattern, subject) is expected


@pytest.mark.parametrize(
    ("subject", "wildcards"),
    [("", True), ("a..b", True), ("a b", True), ("a.>.b", True), ("a*", True), ("a.*", False)],
)
def test_invalid_subjects_are_transport_errors(subject: str, wildcards: bool) -> None:
    with pytest.raises(TransportError):
        validate_subject(subject, wildcards=wildcards)


@pytest.mark.anyio
async def test_publish_reaches_matching_subscribers_only() -> None:
    bus = MemoryBus()
    t = bus.connect("t")
    one = await t.subscribe("orders.*")
    rest = await t.subscribe("orders.>")
    other = await t.subscribe("invoices.>")
    await t.publish("orders.new", b"a")
    await t.publish("orders.new.eu", b"b")
    assert await take(one, 1) == [b"a"]
    assert await take(rest, 2) == [b"a", b"b"]
    assert isinstance(other, MemorySubscription) and not other._buffer
    with pytest.raises(TransportError):
        await t.publish("orders.*", b"wildcards are for subscribers")


@pytest.mark.anyio
async def test_a_message_over_max_payload_is_refused_before_it_is_sent() -> None:
    bus = MemoryBus()
    t = bus.connect("t")
    sub = await t.subscribe("big")
    await t.publish("big", bytes(WIRE_MAX_PAYLOAD))
    with pytest.raises(TransportError, match="maximum payload exceeded"):
        await t.publish("big", bytes(WIRE_MAX_PAYLOAD + 1))
    with pytest.raises(TransportError, match="maximum payload exceeded"):
        await t.request("big", bytes(WIRE_MAX_PAYLOAD + 1), 1.0)
    assert [len(m) for m in await take(sub, 1)] == [WIRE_MAX_PAYLOAD]
    assert isinstance(sub, MemorySubscription) and not sub._buffer


@pytest.mark.anyio
async def test_request_reply_timeout_and_no_responders() -> None:
    bus = MemoryBus()
    server, client = bus.connect("server"), bus.connect("client")
    async with anyio.create_task_group() as tg:
        tg.start_soon(echo, await server.subscribe("svc.echo"))
        await server.subscribe("svc.silent")
        assert await client.request("svc.echo", b"ping", 1.0) == b"re:ping"
        with pytest.raises(RequestTimeout) as caught:
            await client.request("svc.silent", b"", 0.05)
        assert isinstance(caught.value, TimeoutError)
        with pytest.raises(NoResponders):
            await client.request("svc.nobody", b"", 5.0)
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_queue_group_delivers_each_message_to_one_member() -> None:
    bus = MemoryBus()
    t = bus.connect()
    w1 = await t.subscribe("jobs", queue="workers")
    w2 = await t.subscribe("jobs", queue="workers")
    everyone = await t.subscribe("jobs")
    sent = [str(i).encode() for i in range(100)]
    for data in sent:
        await t.publish("jobs", data)
    assert isinstance(w1, MemorySubscription) and isinstance(w2, MemorySubscription)
    assert sorted(m.data for m in [*w1._buffer, *w2._buffer]) == sorted(sent)
    assert w1._buffer and w2._buffer  # random choice: both served, with overwhelming odds
    assert await take(everyone, 100) == sent


@pytest.mark.anyio
async def test_full_subscription_drops_the_newest_and_counts() -> None:
    bus = MemoryBus()
    t = bus.connect()
    sub = await t.subscribe("burst", max_pending=10)
    for i in range(100):
        await t.publish("burst", str(i).encode())
    assert sub.dropped == 90
    assert await take(sub, 10) == [str(i).encode() for i in range(10)]
    await t.publish("burst", b"room again")
    assert await take(sub, 1) == [b"room again"]


@pytest.mark.anyio
async def test_disconnected_transport_sends_later_and_receives_nothing() -> None:
    bus = MemoryBus()
    server, client = bus.connect("server"), bus.connect("client")
    inbox = await server.subscribe("svc.echo")
    seen = await client.subscribe("news")
    await bus.disconnect(client)
    assert not client.is_connected
    await client.publish("svc.echo", b"queued")  # buffered like nats-py does
    await server.publish("news", b"missed")  # lost for a disconnected subscriber
    with pytest.raises(RequestTimeout):
        await client.request("svc.echo", b"lost", 0.05)
    with pytest.raises(RequestTimeout):
        await client.flush(0.05)
    assert isinstance(inbox, MemorySubscription) and not inbox._buffer

    await bus.reconnect(client)
    assert client.is_connected
    await client.flush()
    assert await take(inbox, 2) == [b"queued", b"lost"]
    await server.publish("news", b"seen")
    assert await take(seen, 1) == [b"seen"]


@pytest.mark.anyio
async def test_disconnected_responder_means_no_responders() -> None:
    bus = MemoryBus()
    server, client = bus.connect("server"), bus.connect("client")
    async with anyio.create_task_group() as tg:
        tg.start_soon(echo, await server.subscribe("svc.echo"))
        await bus.disconnect(server)
        with pytest.raises(NoResponders):
            await client.request("svc.echo", b"", 1.0)
        await bus.reconnect(server)
        assert await client.request("svc.echo", b"back", 1.0) == b"re:back"
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_reconnect_runs_callbacks_and_logs_their_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = MemoryBus()
    t = bus.connect()
    ran: list[str] = []

    async def broken() -> None:
        raise RuntimeError("callback exploded")

    async def note() -> None:
        ran.append("again")

    t.on_reconnect(broken)
    t.on_reconnect(note)
    await bus.reconnect(t)  # connected already: nothing to do
    assert ran == []
    await bus.disconnect(t)
    await bus.reconnect(t)
    assert ran == ["again"]
    assert "callback exploded" in caplog.text


@pytest.mark.anyio
async def test_close_ends_iteration_and_fails_pending_and_later_calls() -> None:
    bus = MemoryBus()
    server, client = bus.connect("server"), bus.connect("client")
    await server.subscribe("svc.silent")
    sub = await client.subscribe("news")
    outcome: list[BaseException] = []

    async def ask() -> None:
        try:
            await client.request("svc.silent", b"", 10.0)
        except TransportClosed as exc:
            outcome.append(exc)

    async def read() -> None:
        async for _ in sub:
            pass
        outcome.append(StopAsyncIteration())

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        async with client:  # leaving the block closes it
            pass
    assert sorted(type(e).__name__ for e in outcome) == ["StopAsyncIteration", "TransportClosed"]
    with pytest.raises(TransportClosed):
        await client.publish("x", b"")
    with pytest.raises(TransportClosed):
        await client.subscribe("x")
    with pytest.raises(TransportClosed):
        await client.flush()


@pytest.mark.anyio
async def test_unsubscribe_discards_buffered_and_ends_iteration() -> None:
    bus = MemoryBus()
    t = bus.connect()
    sub = await t.subscribe("x")
    await t.publish("x", b"unread")
    await sub.unsubscribe()
    await sub.unsubscribe()  # idempotent
    assert [m async for m in sub] == []
    with pytest.raises(NoResponders):
        await t.request("x", b"", 1.0)
