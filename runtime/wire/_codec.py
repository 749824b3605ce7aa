"""One codec for every frame: msgpack out, typed decoding in."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from ..config import DEFAULT_SUBJECT_PREFIX
from ..errors import FrameDecodeError
from .frames import Frame

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
    """The NATS subjects of one mailrun installation (prefix ``mailrun``).

    ``Subjects(prefix)`` names the hub's request subjects as the hub serves
    them. ``Subjects(prefix, deployment_id=dep)`` is one deployment's sidecar
    view: its requests go to ``<request subject>.<dep>``, a subject that the
    NATS permissions let only that deployment's identity publish on, so the
    subject itself tells the hub who sent a frame (docs/security.md).
    """

    REQUESTS = ("hello", "events", "blob", "mint", "state", "sleep")
    """The request subjects' names (attributes), each served per deployment."""

    def __init__(self, prefix: str = DEFAULT_SUBJECT_PREFIX, *, deployment_id: str = "") -> None:
        if not prefix or any(c in prefix for c in " *>\t\r\n") or prefix.endswith("."):
            raise ValueError(f"invalid subject prefix {prefix!r}")
        if not _is_token(deployment_id, allow_empty=True):
            raise ValueError(f"invalid deployment id {deployment_id!r} for a subject")
        self.prefix = prefix
        self.deployment_id = deployment_id
        suffix = f".{deployment_id}" if deployment_id else ""
        self.hello = f"{prefix}.hub.hello{suffix}"
        self.announce = f"{prefix}.hub.announce"
        self.events = f"{prefix}.hub.events{suffix}"
        self.blob = f"{prefix}.hub.blob{suffix}"
        self.mint = f"{prefix}.hub.mint{suffix}"
        self.state = f"{prefix}.hub.state{suffix}"
        self.sleep = f"{prefix}.hub.sleep{suffix}"

    def inbound(self, deployment_id: str) -> str:
        return f"{self.prefix}.mail.inbound.{deployment_id}"

    def ingress(self, producer: str = "*") -> str:
        """A producer's mail ingress subject (``<prefix>.ingress.<producer id>``);
        only that producer's identity may publish on it, so the subject tells
        the hub who sent a batch. ``ingress()`` is the hub's subscription to all."""
        if producer != "*" and not _is_token(producer):
            raise ValueError(f"invalid producer id {producer!r} for a subject")
        return f"{self.prefix}.ingress.{producer}"

    def requests(self) -> list[str]:
        """The request subjects of this view, in :attr:`REQUESTS` order."""
        return [getattr(self, name) for name in self.REQUESTS]

    @staticmethod
    def inbox_prefix(deployment_id: str) -> str:
        """The reply inbox prefix of a deployment's sidecar connection: its
        identity may subscribe only below it, and the hub answers a request
        on a deployment's subject only to a reply below it."""
        return f"_INBOX_{deployment_id}"


def _is_token(value: str, *, allow_empty: bool = False) -> bool:
    """One NATS subject token: no dots, wildcards or whitespace."""
    if not value:
        return allow_empty
    return not any(c in value for c in ". *>\t\r\n")
