"""The inbox's records: the claim-check envelope of one dispatch, and run state.

An envelope is stored as a msgpack map in ``inbox.envelope``. Release 1 wrote
``{"v": 1, dispatch_id, deployment_id, address, kind, message_id, sender,
subject, body}`` with no ``run_id`` (the run id was the address); this
release writes ``"v": 2`` with the MailInbound fields. One reader takes both.
Fields added since (``raw``, ``context``) have defaults: an envelope written before them
reads as without them, and an older reader skips them.
A run's state (``run_state.state``) is the handler's ``ctx.state`` as a
msgpack map, unchanged since release 1.

Readers raise :class:`RecordDecodeError` for anything they cannot read, so
callers quarantine it with that reason instead of crashing on it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from runtime import MailInbound, RecordDecodeError
from runtime.wire import MailContext

ENVELOPE_VERSION = 2


class Envelope(msgspec.Struct, kw_only=True):
    v: int = ENVELOPE_VERSION
    dispatch_id: str
    deployment_id: str = ""
    run_id: str | None = None
    address: str = ""
    seq: int | None = None
    kind: str = "mail"
    message_id: str | None = None
    sender: str | None = None
    subject: str | None = None
    body: bytes | None = None
    body_digest: str | None = None
    start_request_id: str | None = None
    owner_epoch: int = 0
    version: int = 0  # the workflow version that processes it (0: the first)
    raw: bytes | None = None  # the message as it came over SMTP (None: not SMTP)
    context: MailContext | None = None  # what the hub read from the mail (tag, thread, auth)

    @property
    def effective_run_id(self) -> str:
        return self.run_id if self.run_id is not None else self.address

    @classmethod
    def from_frame(
        cls, frame: MailInbound, body: bytes | None, raw: bytes | None = None
    ) -> Envelope:
        """The envelope of a delivered frame; ``body`` is inline or already
        fetched, ``raw`` the fetched raw message."""
        return cls(
            dispatch_id=frame.dispatch_id,
            deployment_id=frame.deployment_id,
            run_id=frame.effective_run_id,
            address=frame.address,
            seq=frame.seq,
            kind=frame.kind,
            message_id=frame.message_id,
            sender=frame.sender,
            subject=frame.subject,
            body=body,
            body_digest=frame.claim.digest if frame.claim is not None else None,
            start_request_id=frame.start_request_id,
            owner_epoch=frame.owner_epoch,
            version=frame.version,
            raw=raw,
            context=frame.context,
        )


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Envelope)


def encode_envelope(envelope: Envelope) -> bytes:
    return _encoder.encode(envelope)


def decode_envelope(data: bytes) -> Envelope:
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise RecordDecodeError(f"unreadable inbox envelope: {exc}") from exc
    except RecursionError:
        raise RecordDecodeError("unreadable inbox envelope: nested too deeply") from None


def salvage_run_id(data: bytes) -> str:
    """The run an unreadable envelope was for, if its bytes still say so; else ""."""
    try:
        raw = msgspec.msgpack.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return ""
    if not isinstance(raw, dict):
        return ""
    for key in ("run_id", "address"):  # release 1: the run id is the address
        value = raw.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def encode_run_state(state: dict[str, Any]) -> bytes:
    return _encoder.encode(state)


def decode_run_state(data: bytes) -> dict[str, Any]:
    try:
        state = msgspec.msgpack.decode(data)
    except msgspec.DecodeError as exc:
        raise RecordDecodeError(f"unreadable run state: {exc}") from exc
    except RecursionError:
        raise RecordDecodeError("unreadable run state: nested too deeply") from None
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise RecordDecodeError("unreadable run state: not a map with string keys")
    try:
        # ctx.state is JSON-able (the run actor checks every commit): stored
        # bytes that decode to something else (an extension type, a map with
        # array keys) were not written by a handler.
        msgspec.json.encode(state)
    except (TypeError, ValueError, RecursionError) as exc:
        raise RecordDecodeError(f"unreadable run state: not JSON-able: {exc}") from None
    return state
