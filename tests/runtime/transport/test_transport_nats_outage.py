"""A request of the NATS transport across the loss of its client: sent
just before nats-py closed the client for good, it is sent again on the
client that replaces it and answered within its own timeout
(runtime/transport/_nats.py)."""

from __future__ import annotations

import time

import anyio
import pytest

from runtime import Subscription, open_nats
from runtime.transport._nats import NatsTransport
from tests.support import NatsServerProcess

pytestmark = pytest.mark.anyio


async def test_a_request_in_flight_when_its_client_is_closed_for_good_is_sent_again(
    nats_server: NatsServerProcess,
) -> None:
    async with (
        open_nats(nats_server.url, name="t", backoff_max=0.01) as t,
        open_nats(nats_server.url, name="svc") as svc,
        anyio.create_task_group() as tg,
    ):
        assert isinstance(t, NatsTransport)
        seen: list[bytes] = []

        async def answer_once_its_asker_was_cut_off(sub: Subscription) -> None:
            async for msg in sub:
                seen.append(msg.data)
                if len(seen) == 1:
                    # The asker's client is closed for good while it waits:
                    # the server answers a protocol error with -ERR and a
                    # hang-up, and nats-py takes that -ERR for final. This
                    # first copy's answer could only go to the closed client.
                    closed = t._nc
                    closed._transport.write(b"NONSENSE\r\n")
                    await closed._transport.drain()
                    continue
                await msg.respond(b"re:" + msg.data)

        sub = await svc.subscribe("svc.cut")
        await svc.flush()
        tg.start_soon(answer_once_its_asker_was_cut_off, sub)
        started = time.monotonic()
        assert await t.request("svc.cut", b"ask", 10.0) == b"re:ask"
        # Answered once the keeper's new client was up, not at the timeout.
        assert time.monotonic() - started < 5.0
        assert seen == [b"ask", b"ask"]
        tg.cancel_scope.cancel()
