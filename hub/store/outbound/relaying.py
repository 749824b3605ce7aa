"""The relay's writes to ``outbound_mail``: what is due, and each attempt's outcome.

Each step is its own short transaction, never one held open across an SMTP
exchange. The order is what makes a crash visible: ``sending`` (and the
attempt) commits before the mail goes to the relay, ``sent`` after the relay
accepted it. A row still ``sending`` when a hub starts was in an SMTP
transaction when the previous hub stopped: the relay may have accepted it, so
it is sent again marked ``in_doubt`` (docs/hub.md, "Outbound mail").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from runtime.loops import ATTEMPT_LIMIT

from ..base import Store
from ..sql import Params, Statement, Tx, sql
from .outbox import OutboundStatus

_IN_DOUBT = (
    "the hub stopped during an SMTP transaction: the relay may have this mail already,"
    " and a copy sent again carries the same Message-ID"
)
# Saturating, like every attempt counter (runtime.loops.next_attempt).
_ATTEMPT = f"attempts = MIN(attempts + 1, {ATTEMPT_LIMIT})"
_ATTEMPT_PG = f"attempts = LEAST(attempts + 1, {ATTEMPT_LIMIT})"

_INTERRUPTED = sql(
    "UPDATE outbound_mail SET status = ?, in_doubt = 1, last_error = ?,"
    " next_attempt_at = ? WHERE status = ?"
)
_UNPARK = sql("UPDATE outbound_mail SET status = ?, next_attempt_at = ? WHERE status = ?")
_DUE = sql(
    "SELECT id, message_id, sender, recipient, subject, body, created_at, attempts, in_doubt,"
    " spec FROM outbound_mail WHERE status = ? AND next_attempt_at <= ?"
    " ORDER BY next_attempt_at, created_at, rowid LIMIT ?"
)
_NEXT_DUE = sql("SELECT MIN(next_attempt_at) FROM outbound_mail WHERE status = ?")
_SENDING = sql(
    f"UPDATE outbound_mail SET status = ?, {_ATTEMPT} WHERE id = ? AND status = ?",
    postgres=f"UPDATE outbound_mail SET status = ?, {_ATTEMPT_PG} WHERE id = ? AND status = ?",
)
_SENT = sql(
    "UPDATE outbound_mail SET status = ?, relay_answer = ?, sent_at = ?, body = NULL,"
    " spec = NULL"
    " WHERE id = ? AND status = ?"
)
_FAILED = sql(
    "UPDATE outbound_mail SET status = ?, last_error = ?, relay_answer = ?"
    " WHERE id = ? AND status = ?"
)
_RETRY = sql(
    "UPDATE outbound_mail SET status = ?, last_error = ?, next_attempt_at = ?"
    " WHERE id = ? AND status = ?"
)
_DEFER = " last_error = ?, next_attempt_at = ? WHERE id = ? AND status = ?"
_DEFERRED = sql(
    f"UPDATE outbound_mail SET {_ATTEMPT},{_DEFER}",
    postgres=f"UPDATE outbound_mail SET {_ATTEMPT_PG},{_DEFER}",
)


@dataclass(frozen=True)
class DueMail:
    """A pending mail, as the relay needs it."""

    id: str
    message_id: str
    sender: str
    recipient: str
    subject: str
    body: bytes
    created_at: float
    attempts: int
    in_doubt: bool
    spec: bytes | None = None
    """The msgpack of its rich parts (``spec.OutboundSpec``); None: none."""


def _settle_at_boot(tx: Tx, *, relayed: bool, now: float) -> dict[str, int]:
    waiting = OutboundStatus.PENDING if relayed else OutboundStatus.NO_RELAY
    parked = OutboundStatus.NO_RELAY if relayed else OutboundStatus.PENDING
    interrupted = tx.execute(_INTERRUPTED, (waiting, _IN_DOUBT, now, OutboundStatus.SENDING))
    moved = tx.execute(_UNPARK, (waiting, now, parked))
    return {"in_doubt": interrupted, str(waiting): moved}


async def settle_at_boot(store: Store, *, relayed: bool) -> dict[str, int]:
    """Before a hub sends anything: a mail left ``sending`` becomes in doubt;
    with a relay, ``no_relay`` mail becomes ``pending``; without one, every
    mail waiting for a relay becomes ``no_relay``. Returns the counts moved."""
    return await store.transact(partial(_settle_at_boot, relayed=relayed, now=time.time()))


def _due_mail(r: Any) -> DueMail:
    spec = None if r[9] is None else bytes(r[9])
    return DueMail(r[0], r[1], r[2], r[3], r[4], bytes(r[5] or b""), r[6], r[7], bool(r[8]), spec)


def _due(tx: Tx, now: float, limit: int) -> list[DueMail]:
    return [_due_mail(r) for r in tx.fetch_all(_DUE, (OutboundStatus.PENDING, now, limit))]


async def due_mail(store: Store, *, now: float, limit: int) -> list[DueMail]:
    """Up to ``limit`` pending mails whose next attempt is due, oldest first."""
    return await store.read(partial(_due, now=now, limit=limit))


def _next_due(tx: Tx) -> float | None:
    row = tx.fetch_one(_NEXT_DUE, (OutboundStatus.PENDING,))
    return None if row is None or row[0] is None else float(row[0])


async def next_due(store: Store) -> float | None:
    """When the earliest pending mail is due (None: none is pending)."""
    return await store.read(_next_due)


async def mark_sending(store: Store, mail_id: str) -> bool:
    """Claim one pending mail for an SMTP transaction (one attempt more);
    False when it is not pending any more."""
    claimed = await _update(
        store, _SENDING, (OutboundStatus.SENDING, mail_id, OutboundStatus.PENDING)
    )
    return claimed == 1


async def mark_sent(store: Store, mail_id: str, answer: str) -> None:
    """The relay accepted it: the body and the rich parts go (the relay's now)."""
    await _update(
        store,
        _SENT,
        (OutboundStatus.SENT, answer, time.time(), mail_id, OutboundStatus.SENDING),
    )


async def mark_failed(store: Store, mail_id: str, error: str, answer: str | None) -> None:
    """Refused for good: kept, with the refusal, and never sent again."""
    await _update(
        store, _FAILED, (OutboundStatus.FAILED, error, answer, mail_id, OutboundStatus.SENDING)
    )


async def mark_retry(store: Store, mail_id: str, error: str, at: float) -> None:
    """This attempt failed for now: pending again, due at ``at``."""
    await _update(
        store, _RETRY, (OutboundStatus.PENDING, error, at, mail_id, OutboundStatus.SENDING)
    )


async def defer(store: Store, mail_ids: Sequence[str], error: str, at: float) -> None:
    """The relay could not be reached for these pending mails: one attempt
    more each, due again at ``at``."""
    rows = [(error, at, mail_id, OutboundStatus.PENDING) for mail_id in mail_ids]
    await store.transact(lambda tx: tx.execute_many(_DEFERRED, rows))


def _execute(tx: Tx, statement: Statement, params: Params) -> int:
    return tx.execute(statement, params)


async def _update(store: Store, statement: Statement, params: Params) -> int:
    """One UPDATE as a write transaction; the rows it changed."""
    return await store.transact(partial(_execute, statement=statement, params=params))
