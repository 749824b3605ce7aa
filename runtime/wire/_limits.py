"""Size limits on what a handler commits, chosen so that every frame fits one NATS message.

NATS refuses a message larger than the server's ``max_payload``: 1 MiB unless
the server is configured otherwise (the embedded server of ``mailrun up``
keeps the default, and nats-py assumes it until the server's INFO says
otherwise). A value too large to travel must be refused where the handler
makes it, when one run can fail with a clear error, not found out when the
shipper sends it: there it would block every later event of the deployment.

Every size is that of the value's msgpack encoding, the form in which the
sidecar stores it and every frame carries it. How the limits add up:

- a RunEvents frame is packed to at most ``MAX_FRAME_BYTES``, three quarters
  of the payload (the rest is margin for the frame's own fields);
- any single event is at most ``MAX_EVENT_BYTES``, so a frame holding one
  event always fits;
- each value a handler hands over is well under that: ``ctx.state``, a run's
  result and a child's input 256 KiB each, a sent mail (subject and body)
  512 KiB, an approval prompt and a timer's payload 64 KiB, a step's result
  256 KiB; an error text is cut at 16 KiB;
- the hub's snapshot of one run (state, result and error: under 530 KiB) is
  under ``MAX_FRAME_BYTES`` too, so a page of the hub's state (``RunStates``)
  holding one run always fits.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import msgspec

_KIB: Final = 1024

WIRE_MAX_PAYLOAD: Final = 1024 * _KIB
"""The NATS ``max_payload`` mailrun needs (the server's default); a smaller one
refuses frames these limits allow."""
MAX_FRAME_BYTES: Final = 768 * _KIB
"""What the sidecar packs one RunEvents frame to."""


class SizeLimit(NamedTuple):
    """A bound on the encoded size of one kind of value; errors name it by ``name``."""

    name: str
    bytes: int


MAX_STATE: Final = SizeLimit("max_state_bytes", 256 * _KIB)
MAX_RESULT: Final = SizeLimit("max_result_bytes", 256 * _KIB)
MAX_INPUT: Final = SizeLimit("max_input_bytes", 256 * _KIB)
MAX_MAIL: Final = SizeLimit("max_mail_bytes", 512 * _KIB)
MAX_PROMPT: Final = SizeLimit("max_prompt_bytes", 64 * _KIB)
MAX_TIMER_PAYLOAD: Final = SizeLimit("max_timer_payload_bytes", 64 * _KIB)
MAX_STEP_RESULT: Final = SizeLimit("max_step_result_bytes", 256 * _KIB)
MAX_EVENT: Final = SizeLimit("max_event_bytes", 640 * _KIB)
MAX_ERROR: Final = SizeLimit("max_error_bytes", 16 * _KIB)
SIZE_LIMITS: Final = (
    MAX_STATE,
    MAX_RESULT,
    MAX_INPUT,
    MAX_MAIL,
    MAX_PROMPT,
    MAX_TIMER_PAYLOAD,
    MAX_STEP_RESULT,
    MAX_EVENT,
    MAX_ERROR,
)

_encoder = msgspec.msgpack.Encoder()


def encoded_size(value: Any) -> int:
    """The size of ``value`` as msgpack (raises msgspec.EncodeError or TypeError
    for what msgpack cannot hold)."""
    return len(_encoder.encode(value))


def clip_text(text: str, limit: SizeLimit = MAX_ERROR) -> str:
    """``text`` cut to at most ``limit.bytes`` UTF-8 bytes, saying how much was cut.

    For prose (an error), which is better shown cut than refused: a run that
    fails must fail with its error, even a long one."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit.bytes:
        return data.decode("utf-8")
    head = data[: limit.bytes - 64].decode("utf-8", "ignore")
    return f"{head} ... [{len(data) - len(head.encode('utf-8'))} bytes cut]"
