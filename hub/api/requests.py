"""HTTP request bodies: bounded reading and typed decoding.

A body is read with a bound in size (a huge upload is refused as soon as it
passes the limit, never buffered whole) and in time (a client trickling it
holds no task for long), and decoded straight into a typed Struct:
malformed JSON and a wrong shape are different errors. Whatever the bytes,
the answer is one of those typed errors: msgspec refuses invalid UTF-8,
lone surrogates and numbers out of range by itself, and nesting past its
depth limit with a RecursionError caught here.

Fields that end up in a mail header or a log line (``to``, ``from``,
``subject``, ``message_id``, a signal's name) are one line each: a CR or LF
there would let a sender forge headers of a mail a run sends on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar

import anyio
import msgspec
from starlette.requests import Request

from .._errors import (
    BodyTimeout,
    HubError,
    InvalidSignal,
    MalformedJson,
    PayloadTooLarge,
)
from ..intake import reserved_message_id as _reserved
from ..intake import single_line
from ..store import DEFAULT_ENTRYPOINT, MailChange, PolicyChange, Trigger

T = TypeVar("T")


class DeploymentIn(msgspec.Struct, kw_only=True):
    name: str
    source: str | None = None
    files: dict[str, str] | None = None
    entrypoint: str = DEFAULT_ENTRYPOINT
    domain: str | None = None  # one of the hub's mail domains (None: its first)
    # Its failure policy (None: the default), checked by the store.
    on_failure: str | None = None
    max_attempts: int | None = None
    max_backoff: float | None = None
    handler_timeout: float | None = None
    max_concurrent_runs: int | None = None
    mail: MailChange | None = None  # its mail settings (None: the defaults)

    def policy(self) -> PolicyChange:
        return PolicyChange(
            on_failure=self.on_failure,
            max_attempts=self.max_attempts,
            max_backoff=self.max_backoff,
            handler_timeout=self.handler_timeout,
            max_concurrent_runs=self.max_concurrent_runs,
        )


class PolicyIn(PolicyChange, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """``PATCH /workflows/deployments/{key}``: any of the policy's settings,
    and any of its ``mail`` settings; a misspelt one is refused, not ignored."""

    mail: MailChange | None = None

    def policy(self) -> PolicyChange:
        """The failure policy's part of the change."""
        fields = {name: getattr(self, name) for name in PolicyChange.__struct_fields__}
        return PolicyChange(**fields)


class CancelIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``POST /runs/{id}/cancel``: why (shown to the handler and kept as the
    run's error), and whether the run ends at once, unseen by its handler."""

    reason: str = "cancelled"
    terminate: bool = False


class VersionIn(msgspec.Struct, kw_only=True):
    source: str | None = None
    files: dict[str, str] | None = None
    entrypoint: str | None = None  # None: the active version's


class SignalIn(msgspec.Struct, kw_only=True):
    name: str
    payload: Any = None  # any JSON value; absent is null
    message_id: str | None = None


class ApprovalIn(msgspec.Struct, kw_only=True):
    # Checked after decoding (``DECISIONS``), not as a Literal: a decoder
    # stops at the first value it refuses, and a body that is malformed
    # further on must still be 400 malformed_json.
    decision: str


DECISIONS = ("approve", "reject")


def is_number(text: str) -> bool:
    """A count ``int`` can read: ASCII digits (``str.isdigit`` also takes "²",
    which ``int`` refuses), and few (``int`` refuses more than 4300)."""
    return text.isascii() and text.isdigit() and len(text) <= 18


async def read_json(
    request: Request,
    type_: type[T],
    *,
    limit: int,
    invalid: type[HubError],
    timeout: float,
) -> T:
    """Read at most ``limit`` bytes of body within ``timeout`` seconds and
    decode them as ``type_``."""
    declared = request.headers.get("content-length")
    raw = await read_body(request.stream(), declared, limit=limit, timeout=timeout)
    return decode_json(raw, type_, invalid)


async def read_body(
    chunks: AsyncIterator[bytes], declared: str | None, *, limit: int, timeout: float | None
) -> bytes:
    """A request body of at most ``limit`` bytes (``declared``: its
    Content-Length, if any), arrived within ``timeout`` seconds (None: no
    deadline, for a body that has arrived whole)."""
    if declared is not None and is_number(declared) and int(declared) > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes exceeds {limit}")
    if timeout is None:
        return await _read(chunks, limit)
    try:
        with anyio.fail_after(timeout):
            return await _read(chunks, limit)
    except TimeoutError:
        raise BodyTimeout(f"the request body did not arrive within {timeout:g} s") from None


async def _read(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    raw = bytearray()
    async for chunk in chunks:
        raw += chunk
        if len(raw) > limit:
            raise PayloadTooLarge(f"request body exceeds {limit} bytes")
    return bytes(raw)


def decode_json(raw: bytes, type_: type[T], invalid: type[HubError]) -> T:
    """``raw`` as ``type_``: ``invalid`` when it does not fit, MalformedJson
    when it is not JSON."""
    try:
        return msgspec.json.decode(raw, type=type_)
    except msgspec.ValidationError as exc:
        raise invalid(str(exc)) from exc
    except msgspec.DecodeError as exc:
        raise MalformedJson(f"request body is not JSON: {exc}") from exc
    except RecursionError:
        # msgspec's own depth guard, raised cleanly before the C stack runs out.
        raise MalformedJson("request body is nested too deeply") from None


def signal_trigger(signal: SignalIn, *, run_id: str, deployment_id: str, max_body: int) -> Trigger:
    """Validate a decoded ``POST /runs/{id}/signals`` body (digest is added by
    the caller).

    The payload is stored as JSON with its object keys sorted: one value has
    one encoding, so a retry that encodes the same value with another key
    order is the same content for its message id.
    """
    if not 0 < len(signal.name) <= 200 or not single_line(signal.name):
        raise InvalidSignal("'name' must be 1 to 200 characters on one line")
    if signal.message_id is not None and not (
        0 < len(signal.message_id) <= 512 and single_line(signal.message_id)
    ):
        raise InvalidSignal("'message_id' must be 1 to 512 characters on one line")
    if _reserved(signal.message_id):
        raise InvalidSignal(f"'message_id' {signal.message_id!r} has a prefix the hub reserves")
    body = msgspec.json.encode(signal.payload, order="sorted")
    if len(body) > max_body:
        raise PayloadTooLarge(f"signal payload of {len(body)} bytes exceeds {max_body}")
    return Trigger(
        deployment_id=deployment_id,
        run_id=run_id,
        kind="signal",
        message_id=signal.message_id,
        subject=signal.name,
        body=body,
    )
