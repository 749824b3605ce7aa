"""The NATS fault proxy (tests/faults) against a real nats-server and real clients."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import nats
import pytest

from runtime import Subscription, Transport, open_nats
from tests.faults import FrameParser, NatsFaultProxy, subject_matches
from tests.faults.harness.proxy import ProtocolError
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.transport import echo, take

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def proxied(server: NatsServerProcess) -> AsyncIterator[tuple[NatsFaultProxy, Transport]]:
    """A proxy in front of ``server`` and a client connected through it."""
    async with NatsFaultProxy(server.url) as proxy, open_nats(proxy.url, name="via") as client:
        yield proxy, client


async def until(sub: Subscription, last: bytes, timeout: float = 5.0) -> list[bytes]:
    """Every message up to and including ``last`` (a sentinel published after
    the messages under test: NATS keeps one publisher's order)."""
    got: list[bytes] = []
    with anyio.fail_after(timeout):
        async for msg in sub:
            got.append(msg.data)
            if msg.data == last:
                break
    return got


# --- the protocol parser ------------------------------------------------------------

STREAM = (
    b'INFO {"server_id":"x","max_payload":1048576}\r\n'
    b"PING\r\n"
    b"MSG orders.eu 7 5\r\nhello\r\n"
    b"MSG orders.us 7 _INBOX.a.b 4\r\n\r\n\r\n\r\n"
    b"HMSG h.one 9 _INBOX.c 24 29\r\nNATS/1.0\r\nA: bcdefgh\r\n\r\nworld\r\n"
    b"+OK\r\n"
)


def test_the_parser_cuts_frames_at_any_read_boundary() -> None:
    expected = [
        ("INFO", None, None),
        ("PING", None, None),
        ("MSG", "orders.eu", None),
        ("MSG", "orders.us", "_INBOX.a.b"),
        ("HMSG", "h.one", "_INBOX.c"),
        ("+OK", None, None),
    ]
    for step in (1, 2, 3, 7, len(STREAM)):
        parser = FrameParser()
        frames = []
        for at in range(0, len(STREAM), step):
            frames += parser.feed(STREAM[at : at + step])
        assert [(f.op, f.subject, f.reply) for f in frames] == expected, step
        assert b"".join(f.raw for f in frames) == STREAM
        # A payload that itself holds CRLF is taken by its byte count.
        assert frames[3].payload == b"\r\n\r\n"
        assert frames[4].payload == b"NATS/1.0\r\nA: bcdefgh\r\n\r\nworld"


def test_the_parser_refuses_what_is_not_nats() -> None:
    with pytest.raises(ProtocolError):
        FrameParser().feed(b"PUB a.b notanumber\r\n")
    with pytest.raises(ProtocolError):
        FrameParser().feed(b"PUB a.b 3\r\nabcXY")  # the payload overruns its size


@pytest.mark.parametrize(
    ("pattern", "subject", "matches"),
    [
        ("a.b", "a.b", True),
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),
        ("a.>", "a.b.c", True),
        ("a.>", "a", False),
        ("*.b", "a.b", True),
        (">", "anything.at.all", True),
        ("a.b", "a.c", False),
    ],
)
def test_subject_patterns_follow_nats_wildcards(pattern: str, subject: str, matches: bool) -> None:
    assert subject_matches(pattern, subject) is matches


# --- the proxy ---------------------------------------------------------------------


async def test_pub_sub_and_request_reply_pass_through(nats_server: NatsServerProcess) -> None:
    async with (
        proxied(nats_server) as (proxy, client),
        open_nats(nats_server.url, name="direct") as direct,
    ):
        inbound = await client.subscribe("to.client")
        outbound = await direct.subscribe("to.server")
        served = await client.subscribe("svc.echo")
        await client.flush()
        async with anyio.create_task_group() as tg:
            tg.start_soon(echo, served)
            await direct.publish("to.client", b"down")
            await client.publish("to.server", b"up")
            assert await take(inbound, 1) == [b"down"]
            assert await take(outbound, 1) == [b"up"]
            # Both ways through the proxy: the request in, the reply out...
            assert await direct.request("svc.echo", b"ping", 5) == b"re:ping"
            # ...and a request out, answered from outside.
            out_echo = await direct.subscribe("svc.outside")
            await direct.flush()
            tg.start_soon(echo, out_echo)
            assert await client.request("svc.outside", b"pong", 5) == b"re:pong"
            tg.cancel_scope.cancel()
    assert proxy.count("forwarded") > 0
    assert proxy.count("dropped") == proxy.count("duplicated") == proxy.count("delayed") == 0
    assert proxy.counts["connections"] == 1


async def test_a_drop_rule_loses_exactly_its_subject(nats_server: NatsServerProcess) -> None:
    async with (
        proxied(nats_server) as (proxy, client),
        open_nats(nats_server.url, name="direct") as direct,
    ):
        sub = await direct.subscribe("orders.*")
        await direct.flush()
        rule = proxy.add_rule("drop", "orders.eu", direction="to_server")
        for i in range(3):
            await client.publish("orders.eu", b"eu%d" % i)
            await client.publish("orders.us", b"us%d" % i)
        await client.publish("orders.end", b"end")
        assert await until(sub, b"end") == [b"us0", b"us1", b"us2", b"end"]
        assert rule.hits == 3 and proxy.counts["to_server.dropped"] == 3

        # The other direction, only the first frame: a lost delivery.
        proxy.clear()
        inbound = await client.subscribe("orders.>")
        await client.flush()
        first = proxy.add_rule("drop", "orders.>", direction="to_client", times=1)
        for body in (b"a", b"b", b"end"):
            await direct.publish("orders.x", body)
        assert await until(inbound, b"end") == [b"b", b"end"]
        assert first.hits == 1 and proxy.counts["to_client.dropped"] == 1


async def test_duplicate_delivers_a_frame_twice(nats_server: NatsServerProcess) -> None:
    async with (
        proxied(nats_server) as (proxy, client),
        open_nats(nats_server.url, name="direct") as direct,
    ):
        inbound = await client.subscribe("dup.*")
        requests = await direct.subscribe("svc.count")
        await client.flush()
        await direct.flush()
        proxy.add_rule("duplicate", "dup.*", direction="to_client")
        await direct.publish("dup.a", b"once")
        await direct.publish("dup.end", b"end")
        assert await until(inbound, b"end") == [b"once", b"once", b"end"]
        assert proxy.count("duplicated") == 2

        # A duplicated request reaches the responder twice; the requester
        # takes the first answer.
        proxy.clear()
        proxy.add_rule("duplicate", "svc.count", direction="to_server")
        seen: list[bytes] = []

        async def answer() -> None:
            async for msg in requests:
                seen.append(msg.data)
                await msg.respond(b"%d" % len(seen))

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer)
            assert await client.request("svc.count", b"q", 5) == b"1"
            await wait_for(lambda: seen == [b"q", b"q"])
            tg.cancel_scope.cancel()
        assert proxy.count("duplicated") == 3


async def test_delay_holds_a_frame_while_later_ones_pass(nats_server: NatsServerProcess) -> None:
    async with (
        proxied(nats_server) as (proxy, client),
        open_nats(nats_server.url, name="direct") as direct,
    ):
        sub = await direct.subscribe("q.*")
        await direct.flush()
        proxy.add_rule("delay", "q.slow", delay_ms=300)
        began = time.monotonic()
        await client.publish("q.slow", b"slow")
        await client.publish("q.fast", b"fast")
        got: list[tuple[bytes, float]] = []
        with anyio.fail_after(5):
            async for msg in sub:
                got.append((msg.data, time.monotonic() - began))
                if len(got) == 2:
                    break
        assert [data for data, _ in got] == [b"fast", b"slow"]
        assert got[1][1] >= 0.3
        assert proxy.counts["to_server.delayed"] == 1


async def test_blackhole_forwards_nothing_until_healed(nats_server: NatsServerProcess) -> None:
    async with (
        proxied(nats_server) as (proxy, client),
        open_nats(nats_server.url, name="direct") as direct,
    ):
        inbound = await client.subscribe("bh.in")
        outbound = await direct.subscribe("bh.out")
        await client.flush()
        await direct.flush()
        proxy.blackhole()
        await direct.publish("bh.in", b"lost-in")
        await client.publish("bh.out", b"lost-out")
        await wait_for(
            lambda: (
                proxy.counts["to_client.blackholed"] >= 1
                and proxy.counts["to_server.blackholed"] >= 1
            )
        )
        with pytest.raises(TimeoutError):
            await client.flush(timeout=0.3)  # its PING goes nowhere
        assert proxy.connections == 1  # no socket was closed
        proxy.heal()
        await direct.publish("bh.in", b"after")
        await client.publish("bh.out", b"after")
        assert await take(inbound, 1) == [b"after"]
        assert await take(outbound, 1) == [b"after"]
        assert proxy.counts["connections"] == 1  # the same connection all along


async def test_cut_closes_and_refuses_until_restored(nats_server: NatsServerProcess) -> None:
    async with (
        proxied(nats_server) as (proxy, client),
        open_nats(nats_server.url, name="direct") as direct,
    ):
        back = anyio.Event()

        async def reconnected() -> None:
            back.set()

        client.on_reconnect(reconnected)
        sub = await client.subscribe("cut.>")
        await client.flush()
        await proxy.cut()
        assert proxy.connections == 0
        await wait_for(lambda: not client.is_connected)
        with pytest.raises(OSError):
            await anyio.connect_tcp("127.0.0.1", proxy.port)  # refused, like a dead server
        assert not back.is_set()
        await proxy.restore()
        with anyio.fail_after(10):
            await back.wait()
        # The subscription was replayed on the new connection.
        await client.flush()
        await direct.publish("cut.after", b"again")
        assert await take(sub, 1) == [b"again"]
        assert proxy.counts["connections"] == 2


async def test_a_1_mib_payload_passes_intact_both_ways(nats_server: NatsServerProcess) -> None:
    payload = os.urandom(1024 * 1024)
    async with (
        NatsFaultProxy(nats_server.url) as to_sender,
        NatsFaultProxy(nats_server.url) as to_receiver,
        open_nats(to_sender.url, name="sender") as sender,
        open_nats(to_receiver.url, name="receiver") as receiver,
    ):
        sub = await receiver.subscribe("big")
        await receiver.flush()
        # A rule on another subject makes the proxy look at every frame.
        to_receiver.add_rule("drop", "other")
        await sender.publish("big", payload)
        await sender.publish("big", b"small after")
        assert await take(sub, 2) == [payload, b"small after"]
    assert to_receiver.count("dropped") == 0


async def test_header_frames_are_picked_by_subject(nats_server: NatsServerProcess) -> None:
    async with (
        NatsFaultProxy(nats_server.url) as proxy,
        open_nats(nats_server.url, name="direct") as direct,
    ):
        sub = await direct.subscribe("h.*")
        await direct.flush()
        proxy.add_rule("drop", "h.drop", direction="to_server")
        nc = await nats.connect(proxy.url, allow_reconnect=False)
        try:
            await nc.publish("h.drop", b"dropped", headers={"k": "v"})
            await nc.publish("h.keep", b"kept", headers={"k": "v"})
            await nc.flush()
        finally:
            await nc.close()
        assert await take(sub, 1) == [b"kept"]
        assert proxy.counts["to_server.dropped"] == 1
