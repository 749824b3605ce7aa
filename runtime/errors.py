"""The runtime package's exceptions: one root, one subclass per failure.

The tree (a second base in parentheses)::

    MailrunError
      FrameDecodeError (ValueError)
      RecordDecodeError (ValueError)
      InvalidSources (ValueError)
      InvalidSchedule (ValueError)
      ActorError
        ActorStopped
        MailboxFull
        AskTimeout (TimeoutError)
      TransportError
        TransportClosed
        RequestTimeout (TimeoutError)
        NoResponders
      SignatureError
      FailpointError
      FailpointSpecError (ValueError)
      TransactionError
        TransactionFailed
      hub.HubError          the hub's tree, drawn in hub/_errors/
      sidecar.SidecarError  the sidecar's tree, drawn in sidecar/_errors.py
"""

from __future__ import annotations


class MailrunError(Exception):
    """Root of every error mailrun raises on purpose."""


class FrameDecodeError(MailrunError, ValueError):
    """Bytes that are not a frame this release can read (garbage, wrong shape)."""


class RecordDecodeError(MailrunError, ValueError):
    """A persisted record (restore record, envelope) that cannot be read."""


class InvalidSchedule(MailrunError, ValueError):
    """A schedule that cannot fire: neither or both of ``every`` and ``cron``,
    an interval under the floor, a cron expression that does not parse, an
    unknown time zone."""


class InvalidSources(MailrunError, ValueError):
    """A deployment's source files that a sidecar could not lay out on disk."""


class ActorError(MailrunError):
    """Root of the actor kernel's errors."""


class ActorStopped(ActorError):
    """The actor is stopped (or gave up): it takes no more messages."""


class MailboxFull(ActorError):
    """``try_tell`` found the bounded mailbox full."""


class AskTimeout(ActorError, TimeoutError):
    """No reply to an ``ask`` within its timeout."""


class TransportError(MailrunError):
    """Root of the transport's errors."""


class TransportClosed(TransportError):
    """The transport was closed; nothing more can be sent."""


class RequestTimeout(TransportError, TimeoutError):
    """A request got no reply within its timeout."""


class NoResponders(TransportError):
    """Nobody listens on the request's subject (the peer is down)."""


class SignatureError(MailrunError):
    """A deployment key or signature that is malformed or does not verify."""


class FailpointError(MailrunError):
    """Raised by a failpoint whose action is ``raise``."""


class FailpointSpecError(MailrunError, ValueError):
    """A ``MAILRUN_FAILPOINTS`` that is malformed or names an unknown failpoint."""


class TransactionError(MailrunError):
    """A write transaction that did not commit."""


class TransactionFailed(TransactionError):
    """Beginning or committing a write transaction failed: nothing of it is stored."""


__all__ = [
    "ActorError",
    "ActorStopped",
    "AskTimeout",
    "FailpointError",
    "FailpointSpecError",
    "FrameDecodeError",
    "InvalidSources",
    "MailboxFull",
    "MailrunError",
    "NoResponders",
    "RecordDecodeError",
    "RequestTimeout",
    "SignatureError",
    "TransactionError",
    "TransactionFailed",
    "TransportClosed",
    "TransportError",
]
