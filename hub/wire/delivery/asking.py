"""One request of the hub's to a deployment's sidecar, on the sidecar's
inbound subject, between its mail frames: a version to load, a changed
policy. No answer (no sidecar there, a timeout, a reply that does not
decode) is not an error for the asker: it asks again at its next look."""

from __future__ import annotations

import logging
from typing import TypeVar

from runtime import (
    FrameDecodeError,
    FrameDecoder,
    Subjects,
    Transport,
    TransportError,
    encode,
)
from runtime.wire import Frame

log = logging.getLogger("mailrun.hub.asking")

T = TypeVar("T")


async def ask_sidecar(
    transport: Transport,
    subjects: Subjects,
    deployment_id: str,
    frame: Frame,
    replies: FrameDecoder[T],
    timeout: float,
    what: str,
) -> T | None:
    """The sidecar's answer to ``frame``, decoded by ``replies``; None (and
    a line saying ``what`` was asked) when there is none yet."""
    try:
        data = await transport.request(subjects.inbound(deployment_id), encode(frame), timeout)
        return replies.decode(data)
    except (TimeoutError, TransportError, FrameDecodeError) as exc:
        log.info("%s of %s: no answer yet (%s)", what, deployment_id, exc)
        return None
