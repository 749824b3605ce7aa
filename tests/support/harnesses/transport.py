"""Reading a subscription in transport tests (in memory, NATS, through the fault proxy)."""

from __future__ import annotations

import anyio

from runtime import Subscription


async def take(sub: Subscription, count: int, timeout: float = 5.0) -> list[bytes]:
    """The data of the next ``count`` messages on ``sub``, within ``timeout``."""
    got: list[bytes] = []
    with anyio.fail_after(timeout):
        async for msg in sub:
            got.append(msg.data)
            if len(got) == count:
                break
    return got


async def echo(sub: Subscription) -> None:
    """Answer every request on ``sub`` with ``re:`` and its data."""
    async for msg in sub:
        await msg.respond(b"re:" + msg.data)
