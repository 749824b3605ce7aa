"""A trigger's digests (its body's, past the inline limit, and its raw
message's), taken off the event loop when the bytes are many."""

from __future__ import annotations

import anyio
import msgspec

from runtime.wire import INLINE_BODY_LIMIT

from ..store import Trigger, body_digest


async def with_digest(trigger: Trigger) -> Trigger:
    """A big body's digest is a pass over megabytes: taken off the event loop.
    So is the raw message's, which is always kept as a blob."""
    if len(trigger.body) > INLINE_BODY_LIMIT and trigger.digest is None:
        digest = await anyio.to_thread.run_sync(body_digest, trigger.body)
        trigger = msgspec.structs.replace(trigger, digest=digest)
    if trigger.raw is not None and trigger.raw_digest is None:
        raw_digest = await digest_of(trigger.raw)
        trigger = msgspec.structs.replace(trigger, raw_digest=raw_digest)
    return trigger


async def digest_of(data: bytes) -> str:
    """``body_digest(data)``, off the event loop when ``data`` is big."""
    if len(data) <= INLINE_BODY_LIMIT:
        return body_digest(data)
    return await anyio.to_thread.run_sync(body_digest, data)
