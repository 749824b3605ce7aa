"""Just enough of the NATS client protocol to cut a byte stream into frames.

Every protocol line ends with CRLF. ``PUB``/``HPUB`` (client to server) and
``MSG``/``HMSG`` (server to client) are followed by a payload whose byte
count is the line's last argument, and another CRLF. Everything else
(``INFO``, ``CONNECT``, ``PING``, ``PONG``, ``+OK``, ``-ERR``, ``SUB``,
``UNSUB``) is the line alone. Reads may end anywhere, even inside a payload:
the parser keeps the rest until the frame is whole.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_CONTROL_LINE = 1 << 20
"""A line longer than this without CRLF is not NATS (INFO is a few KiB)."""

_PAYLOAD_OPS = frozenset({b"PUB", b"HPUB", b"MSG", b"HMSG"})
# Arguments after the op, without and with a reply subject.
_ARITY = {b"PUB": (2, 3), b"HPUB": (3, 4), b"MSG": (3, 4), b"HMSG": (4, 5)}


class ProtocolError(Exception):
    """The stream is not the NATS protocol (the proxy closes the connection)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One protocol frame exactly as it was on the wire."""

    op: str
    """Upper case: ``PUB``, ``MSG``, ``PING``, ``INFO``, ..."""
    subject: str | None
    """For ``PUB``/``HPUB``/``MSG``/``HMSG`` only."""
    reply: str | None
    raw: bytes

    @property
    def has_payload(self) -> bool:
        return self.subject is not None

    @property
    def payload(self) -> bytes:
        """Headers and body of a message frame (empty for control lines)."""
        if not self.has_payload:
            return b""
        return self.raw[self.raw.index(b"\r\n") + 2 : -2]


def _message_args(op: bytes, args: list[bytes]) -> tuple[str, str | None, int]:
    plain, with_reply = _ARITY[op]
    if len(args) not in (plain, with_reply):
        raise ProtocolError(f"{op.decode()} with {len(args)} arguments")
    try:
        size = int(args[-1])
    except ValueError:
        raise ProtocolError(f"{op.decode()} with a bad size {args[-1]!r}") from None
    if size < 0:
        raise ProtocolError(f"{op.decode()} with a negative size")
    # MSG/HMSG carry a subscription id after the subject; PUB/HPUB do not.
    reply_at = 1 if op in (b"PUB", b"HPUB") else 2
    reply = args[reply_at].decode() if len(args) == with_reply else None
    return args[0].decode(), reply, size


class FrameParser:
    """Feed it bytes as they arrive; it returns the frames completed so far."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need = 0  # bytes the frame at the head needs, once its line is known

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        while self._buf:
            if self._need and len(self._buf) < self._need:
                break  # the rest of a payload is still on its way
            end = self._buf.find(b"\r\n")
            if end < 0:
                if len(self._buf) > MAX_CONTROL_LINE:
                    raise ProtocolError("control line too long")
                break
            parts = bytes(self._buf[:end]).split()
            op = parts[0].upper() if parts else b""
            subject = reply = None
            size = end + 2
            if op in _PAYLOAD_OPS:
                subject, reply, payload = _message_args(op, parts[1:])
                size += payload + 2
                if len(self._buf) < size:
                    self._need = size
                    break
            self._need = 0
            raw = bytes(self._buf[:size])
            if subject is not None and raw[-2:] != b"\r\n":
                raise ProtocolError(f"{op.decode()} payload not followed by CRLF")
            del self._buf[:size]
            frames.append(Frame(op.decode(), subject, reply, raw))
        return frames


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS wildcards: ``*`` is one token, a final ``>`` one or more."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">" and i == len(want) - 1:
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)
