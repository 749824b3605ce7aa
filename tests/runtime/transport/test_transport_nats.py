"""The NATS transport (runtime/transport/_nats.py) against a real nats-server."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from runtime import WIRE_MAX_PAYLOAD, Transport, TransportError, open_nats
from runtime.errors import NoResponders, RequestTimeout, TransportClosed
from runtime.transport._nats import NatsTransport
from runtime.transport._nats_hooks import DEFAULT_BACKOFF
from runtime.transport._nats_subscription import NatsSubscription
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.transport import echo, take

pytestmark = pytest.mark.anyio


async def test_publish_reaches_wildcard_subscribers(nats_server: NatsServerProcess) -> None:
    async with open_nats(nats_server.url, name="t") as t:
        one = await t.subscribe("orders.*")
        rest = await t.subscribe("orders.>")
        await t.flush()
        await t.publish("orders.new", b"a")
        await t.publish("orders.new.eu", b"b")
        with anyio.fail_after(5):
            first = await one.__aiter__().__anext__()
        assert (first.subject, first.data, first.reply) == ("orders.new", b"a", None)
        assert await take(rest, 2) == [b"a", b"b"]


async def test_request_reply_across_connections(nats_server: NatsServerProcess) -> None:
    async with (
        open_nats(nats_server.url, name="server") as server,
        open_nats(nats_server.url, name="client") as client,
        anyio.create_task_group() as tg,
    ):
        sub = await server.subscribe("svc.echo")
        await server.flush()
        tg.start_soon(echo, sub)
        assert await client.request("svc.echo", b"ping", 2.0) == b"re:ping"
        tg.cancel_scope.cancel()


async def test_request_without_reply_times_out(nats_server: NatsServerProcess) -> None:
    async with open_nats(nats_server.url, name="t") as t:
        await t.subscribe("svc.silent")
        await t.flush()
        started = time.monotonic()
        with pytest.raises(RequestTimeout) as caught:
            await t.request("svc.silent", b"", 0.2)
        assert isinstance(caught.value, TimeoutError)
        assert 0.15 < time.monotonic() - started < 2


async def test_request_nobody_listens_to_is_no_responders(nats_server: NatsServerProcess) -> None:
    async with open_nats(nats_server.url, name="t") as t:
        started = time.monotonic()
        with pytest.raises(NoResponders):
            await t.request("svc.nobody", b"", 5.0)
        assert time.monotonic() - started < 2


async def test_queue_group_delivers_each_message_to_one_member(
    nats_server: NatsServerProcess,
) -> None:
    async with open_nats(nats_server.url, name="t") as t:
        got: dict[str, list[bytes]] = {"w1": [], "w2": [], "all": []}
        subs = {
            "w1": await t.subscribe("jobs", queue="workers"),
            "w2": await t.subscribe("jobs", queue="workers"),
            "all": await t.subscribe("jobs"),
        }

        async def collect(name: str) -> None:
            async for msg in subs[name]:
                got[name].append(msg.data)

        async with anyio.create_task_group() as tg:
            for name in subs:
                tg.start_soon(collect, name)
            await t.flush()
            sent = [str(i).encode() for i in range(100)]
            for data in sent:
                await t.publish("jobs", data)
            await wait_for(lambda: len(got["all"]) == 100 and len(got["w1"] + got["w2"]) == 100)
            tg.cancel_scope.cancel()
        assert sorted(got["w1"] + got["w2"]) == sorted(sent)
        assert got["all"] == sent


async def test_max_pending_bounds_the_buffer_and_counts_drops(
    nats_server: NatsServerProcess,
) -> None:
    async with open_nats(nats_server.url, name="t") as t:
        sub = await t.subscribe("burst", max_pending=10)
        assert isinstance(sub, NatsSubscription)
        for i in range(100):
            await t.publish("burst", str(i).encode())
        await t.flush()  # the PONG comes after every message the server routed to us
        # Dropped by nats-py's queue as the messages are read, or by the
        # subscription's buffer once nats-py's task hands them over.
        await wait_for(lambda: sub.dropped == 90)
        assert await take(sub, 10) == [str(i).encode() for i in range(10)]
        assert sub.dropped == 90


async def test_a_flood_past_the_bound_is_delivered_in_order_or_counted_dropped(
    nats_server: NatsServerProcess,
) -> None:
    """A reader slower than the flood: every message is either read, in the
    order sent, or counted as dropped; none vanishes uncounted."""
    sent = 3000
    got: list[int] = []
    async with (
        open_nats(nats_server.url, name="reader") as reader,
        open_nats(nats_server.url, name="writer") as writer,
    ):
        sub = await reader.subscribe("flood", max_pending=20)
        assert isinstance(sub, NatsSubscription)
        await reader.flush()

        async def read() -> None:
            async for msg in sub:
                got.append(int(msg.data))
                for _ in range(20):  # slower than the bus: turns for the writer's replies
                    await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            for i in range(sent):
                await writer.publish("flood", str(i).encode())
            await writer.flush()
            await wait_for(lambda: len(got) + sub.dropped == sent)
            tg.cancel_scope.cancel()
    assert sub.dropped > 0 and len(got) >= 20
    assert got == sorted(got) and len(set(got)) == len(got)
    assert got[:20] == list(range(20))


async def test_a_reader_cancelled_while_waiting_misses_no_later_message(
    nats_server: NatsServerProcess,
) -> None:
    async with open_nats(nats_server.url, name="t") as t:
        sub = await t.subscribe("quiet")
        await t.flush()
        for _ in range(3):  # readers that gave up waiting
            with anyio.move_on_after(0.02) as scope:
                await anext(aiter(sub))
            assert scope.cancelled_caught
        await t.publish("quiet", b"after")
        assert await take(sub, 1) == [b"after"]


@pytest.mark.slow  # a real nats-server killed and started again
async def test_subscriptions_survive_server_sigkill_and_restart(
    nats_server: NatsServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    reconnects = {"server": 0, "client": 0}

    def counter(name: str) -> Callable[[], Awaitable[None]]:
        async def count() -> None:
            reconnects[name] += 1

        return count

    async def broken() -> None:
        raise RuntimeError("callback exploded")

    async with (
        open_nats(nats_server.url, name="server") as server,
        open_nats(nats_server.url, name="client") as client,
        anyio.create_task_group() as tg,
    ):
        server.on_reconnect(broken)
        server.on_reconnect(counter("server"))
        client.on_reconnect(counter("client"))
        sub = await server.subscribe("svc.echo")
        await server.flush()
        tg.start_soon(echo, sub)
        assert await client.request("svc.echo", b"before", 2.0) == b"re:before"

        nats_server.kill()
        await wait_for(lambda: not server.is_connected and not client.is_connected)
        with pytest.raises(TransportError):
            await client.request("svc.echo", b"while down", 0.2)
        with pytest.raises(RequestTimeout):
            await client.flush(0.2)
        await nats_server.start()
        await wait_for(lambda: reconnects == {"server": 1, "client": 1}, timeout=8)

        assert server.is_connected and client.is_connected
        assert await client.request("svc.echo", b"after", 2.0) == b"re:after"
        tg.cancel_scope.cancel()
    assert "callback exploded" in caplog.text


async def test_first_connect_waits_for_a_server_that_starts_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime.transport._nats")
    late = NatsServerProcess(log_file=tmp_path / "nats.log")

    def failed_attempts() -> int:
        return sum(
            "connect to" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records
        )

    async def start_after_two_failures() -> None:
        await wait_for(lambda: failed_attempts() >= 2)
        await late.start()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(start_after_two_failures)
            with anyio.fail_after(10):
                async with open_nats(late.url, name="early") as t:
                    assert t.is_connected
                    sub = await t.subscribe("hello")
                    await t.publish("hello", b"world")
                    assert await take(sub, 1) == [b"world"]
    finally:
        await late.stop()
    assert failed_attempts() >= 2


async def test_first_connect_can_be_cancelled() -> None:
    nobody = NatsServerProcess()  # never started: its port refuses
    started = time.monotonic()
    with anyio.move_on_after(0.3) as scope:
        async with open_nats(nobody.url, name="impatient"):
            pytest.fail("connected to a server that does not exist")
    assert scope.cancelled_caught
    assert time.monotonic() - started < 1.5


async def test_close_while_server_is_down_is_prompt(nats_server: NatsServerProcess) -> None:
    transport: Transport | None = None
    async with open_nats(nats_server.url, name="t") as t:
        transport = t
        sub = await t.subscribe("x")
        nats_server.kill()
        await wait_for(lambda: not t.is_connected)
        started = time.monotonic()
    assert time.monotonic() - started < 1.0
    assert not transport.is_connected
    with pytest.raises(TransportClosed):
        await transport.publish("x", b"")
    with pytest.raises(TransportClosed):
        await transport.request("x", b"", 1.0)
    assert [m async for m in sub] == []


async def test_close_flushes_and_ends_iteration(nats_server: NatsServerProcess) -> None:
    async with open_nats(nats_server.url, name="reader") as reader:
        sub = await reader.subscribe("last.words")
        await reader.flush()
        async with open_nats(nats_server.url, name="writer") as writer:
            await writer.publish("last.words", b"bye")  # not flushed by us: close must
        assert await take(sub, 1) == [b"bye"]
        ended = anyio.Event()

        async def drain() -> None:
            async for _ in sub:
                pass
            ended.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            await sub.unsubscribe()
            with anyio.fail_after(2):
                await ended.wait()
        await sub.unsubscribe()  # idempotent


@pytest.mark.parametrize(
    "url",
    [
        "",
        ",",
        "localhost:4222",
        "http://127.0.0.1:4222",
        "nats://h:port",
        "nats://127.0.0.1:4222,nats://h:port",  # a cluster: every server is checked
    ],
)
async def test_invalid_url_fails_at_once_instead_of_retrying(url: str) -> None:
    with anyio.fail_after(2), pytest.raises(TransportError, match="invalid NATS URL"):
        async with open_nats(url, name="t"):
            pass


# --- long outages -------------------------------------------------------------------


@pytest.mark.slow  # 1100 reconnect attempts
async def test_1100_reconnect_attempts_keep_the_event_loop_responsive_and_end_in_a_reconnect(
    nats_server: NatsServerProcess,
) -> None:
    # Time compressed by configuration: every attempt still happens, each
    # after a delay of at most 1 ms instead of 1 s.
    period = 0.01
    ticks: list[float] = []

    async def heartbeat() -> None:
        while True:
            ticks.append(time.monotonic())
            await anyio.sleep(period)

    async with (
        open_nats(nats_server.url, name="patient", backoff_max=0.001) as t,
        open_nats(nats_server.url, name="other") as other,
        anyio.create_task_group() as tg,
    ):
        assert isinstance(t, NatsTransport)
        sub = await t.subscribe("after.the.outage")
        await t.flush()
        tg.start_soon(heartbeat)
        nats_server.kill()
        await wait_for(lambda: not t.is_connected)
        began = time.monotonic()
        # Past attempt 1025, where 2.0 ** (attempt - 1) once overflowed.
        await wait_for(lambda: t.reconnect_attempts >= 1100, timeout=90, what="1100 attempts")
        outage = time.monotonic() - began
        gaps = [b - a for a, b in itertools.pairwise(ticks) if a >= began]
        # The heartbeat kept beating all along: no attempt held the loop. (A
        # loop that spins holds it for the whole outage, seconds; the bounds
        # leave room for a machine busy with other processes.)
        assert len(gaps) >= 0.25 * outage / period
        assert max(gaps) < 1.5

        await nats_server.start()
        back = time.monotonic()
        await wait_for(lambda: t.is_connected and other.is_connected, timeout=10)
        assert time.monotonic() - back < 2.0  # within a step of its (tiny) backoff, and slack
        assert t.reconnect_attempts == 0
        await other.publish("after.the.outage", b"hello again")
        assert await take(sub, 1) == [b"hello again"]
        tg.cancel_scope.cancel()


async def test_a_client_nats_py_closes_for_good_is_replaced(
    nats_server: NatsServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    reconnects: list[bool] = []

    async def reconnected() -> None:
        reconnects.append(True)

    async with (
        open_nats(nats_server.url, name="t", backoff_max=0.01) as t,
        open_nats(nats_server.url, name="other") as other,
    ):
        assert isinstance(t, NatsTransport)
        t.on_reconnect(reconnected)
        sub = await t.subscribe("still.here")
        await t.flush()
        # The server answers a protocol error with -ERR and a hang-up, and
        # nats-py takes any -ERR but a few for final: it closes the client
        # and reconnects no more.
        closed = t._nc
        closed._transport.write(b"NONSENSE\r\n")
        await closed._transport.drain()
        await wait_for(lambda: closed.is_closed, what="nats-py to close the client")
        await wait_for(lambda: t.is_connected and reconnects, what="a new client")
        assert t._nc is not closed
        await other.publish("still.here", b"on the new client")
        assert await take(sub, 1) == [b"on the new client"]
    assert "was closed" in caplog.text


@pytest.mark.slow  # waits out a reconnect loop's give-up
async def test_a_reconnect_loop_that_stopped_trying_is_replaced(
    nats_server: NatsServerProcess,
) -> None:
    # Patience of 0.5 s instead of some 20 s: the longest attempt nats-py makes.
    t = NatsTransport(
        nats_server.url,
        name="t",
        connect_timeout=2.0,
        backoff=DEFAULT_BACKOFF.capped(0.01),
        stall_after=0.5,
    )
    await t.connect()
    async with anyio.create_task_group() as tg:
        tg.start_soon(t.keep)
        await _stopped_reconnects_are_replaced(t, nats_server)
        tg.cancel_scope.cancel()
    await t.aclose()


async def _stopped_reconnects_are_replaced(
    t: NatsTransport, nats_server: NatsServerProcess
) -> None:
    sub = await t.subscribe("still.here")
    await t.flush()
    nats_server.kill()
    await wait_for(lambda: not t.is_connected)
    # nats-py's reconnect task ends without reconnecting or closing. One
    # cancel is not always enough: an attempt under way may swallow it
    # (asyncio.wait_for's race) or start a task of its own, which would
    # reconnect this client once the server is back. So each task is
    # cancelled until none is left.
    stuck = t._nc

    def given_up() -> bool:
        task = stuck._reconnection_task
        if task is not None and not task.done():
            task.cancel()
            return False
        return True

    await wait_for(given_up, what="nats-py's reconnect task to end")
    await nats_server.start()
    await wait_for(lambda: t.is_connected, what="a new client")
    assert t._nc is not stuck
    await t.publish("still.here", b"on the new client")
    assert await take(sub, 1) == [b"on the new client"]


async def test_a_server_with_a_smaller_max_payload_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "small.conf"
    config.write_text("max_payload: 65536\n")
    with NatsServerProcess(config_file=config, log_file=tmp_path / "nats.log") as server:
        async with open_nats(server.url, name="t"):
            pass
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "at most 65536 bytes" in warning.getMessage()
    assert str(WIRE_MAX_PAYLOAD) in warning.getMessage()


async def test_the_default_max_payload_is_what_mailrun_needs(
    nats_server: NatsServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_nats(nats_server.url, name="t") as t:
        assert t._nc.max_payload == WIRE_MAX_PAYLOAD
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
