"""One codec for every frame: msgpack out, typed decoding in."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from ._config import DEFAULT_SUBJECT_PREFIX
from ._errors import FrameDecodeError
from ._frames import Frame

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()


def encode(frame: msgspec.Struct) -> bytes:
    """Encode a frame (or event) as msgpack."""
    return _encoder.encode(frame)


class FrameDecoder(Generic[T]):
    """A typed decoder; keep one per connection or subscription.

    ``FrameDecoder()`` decodes any :data:`Frame`; ``FrameDecoder(Ack | Refused)``
    only those. Anything else raises :class:`FrameDecodeError`, never a bare
    msgspec error, so callers answer and dead-letter it instead of crashing.
    """

    def __init__(self, type_: Any = Frame) -> None:
        self._decoder: msgspec.msgpack.Decoder[T] = msgspec.msgpack.Decoder(type_)

    def decode(self, data: bytes) -> T:
        try:
            return self._decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise FrameDecodeError(f"undecodable frame ({len(data)} bytes): {exc}") from exc
        except RecursionError:
            # Free-form fields (run state, results) nest as deep as a sender
            # likes; past the interpreter's stack it is garbage like any other.
            raise FrameDecodeError(
                f"undecodable frame ({len(data)} bytes): nested too deeply"
            ) from None


class Subjects:
    """The NATS subjects of one mailrun installation (prefix ``mailrun``)."""

    def __init__(self, prefix: str = DEFAULT_SUBJECT_PREFIX) -> None:
        if not prefix or any(c in prefix for c in " *>\t\r\n") or prefix.endswith("."):
            raise ValueError(f"invalid subject prefix {prefix!r}")
        self.prefix = prefix
        self.hello = f"{prefix}.hub.hello"
        self.announce = f"{prefix}.hub.announce"
        self.events = f"{prefix}.hub.events"
        self.blob = f"{prefix}.hub.blob"
        self.mint = f"{prefix}.hub.mint"
        self.state = f"{prefix}.hub.state"

    def inbound(self, deployment_id: str) -> str:
        return f"{self.prefix}.mail.inbound.{deployment_id}"
