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

from runtime import ATTEMPT_LIMIT, Connection, Params

from .base import Store
from .outbox import OutboundStatus
from .reads import fetch_all, fetch_one

_IN_DOUBT = (
    "the hub stopped during an SMTP transaction: the relay may have this mail already,"
    " and a copy sent again carries the same Message-ID"
)
# Saturating, like every attempt counter (runtime.next_attempt).
_ATTEMPT = f"attempts = MIN(attempts + 1, {ATTEMPT_LIMIT})"


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


async def settle_at_boot(store: Store, *, relayed: bool) -> dict[str, int]:
    """Before a hub sends anything: a mail left ``sending`` becomes in doubt;
    with a relay, ``no_relay`` mail becomes ``pending``; without one, every
    mail waiting for a relay becomes ``no_relay``. Returns the counts moved."""
    now = time.time()
    waiting = OutboundStatus.PENDING if relayed else OutboundStatus.NO_RELAY
    parked = OutboundStatus.NO_RELAY if relayed else OutboundStatus.PENDING

    async def body(db: Connection) -> dict[str, int]:
        interrupted = await db.execute(
            "UPDATE outbound_mail SET status = ?, in_doubt = 1, last_error = ?,"
            " next_attempt_at = ? WHERE status = ?",
            (waiting, _IN_DOUBT, now, OutboundStatus.SENDING),
        )
        moved = await db.execute(
            "UPDATE outbound_mail SET status = ?, next_attempt_at = ? WHERE status = ?",
            (waiting, now, parked),
        )
        return {"in_doubt": interrupted.rowcount, str(waiting): moved.rowcount}

    return await store.transact(body)


async def due_mail(store: Store, *, now: float, limit: int) -> list[DueMail]:
    """Up to ``limit`` pending mails whose next attempt is due, oldest first."""
    rows = await fetch_all(
        store.db,
        "SELECT id, message_id, sender, recipient, subject, body, created_at, attempts, in_doubt"
        " FROM outbound_mail WHERE status = ? AND next_attempt_at <= ?"
        " ORDER BY next_attempt_at, created_at, rowid LIMIT ?",
        (OutboundStatus.PENDING, now, limit),
    )
    return [
        DueMail(r[0], r[1], r[2], r[3], r[4], bytes(r[5] or b""), r[6], r[7], bool(r[8]))
        for r in rows
    ]


async def next_due(store: Store) -> float | None:
    """When the earliest pending mail is due (None: none is pending)."""
    row = await fetch_one(
        store.db,
        "SELECT MIN(next_attempt_at) FROM outbound_mail WHERE status = ?",
        (OutboundStatus.PENDING,),
    )
    return None if row is None or row[0] is None else float(row[0])


async def mark_sending(store: Store, mail_id: str) -> bool:
    """Claim one pending mail for an SMTP transaction (one attempt more);
    False when it is not pending any more."""
    claimed = await _update(
        store,
        f"UPDATE outbound_mail SET status = ?, {_ATTEMPT} WHERE id = ? AND status = ?",
        (OutboundStatus.SENDING, mail_id, OutboundStatus.PENDING),
    )
    return claimed == 1


async def mark_sent(store: Store, mail_id: str, answer: str) -> None:
    """The relay accepted it: the body goes (it is the relay's now)."""
    await _update(
        store,
        "UPDATE outbound_mail SET status = ?, relay_answer = ?, sent_at = ?, body = NULL"
        " WHERE id = ? AND status = ?",
        (OutboundStatus.SENT, answer, time.time(), mail_id, OutboundStatus.SENDING),
    )


async def mark_failed(store: Store, mail_id: str, error: str, answer: str | None) -> None:
    """Refused for good: kept, with the refusal, and never sent again."""
    await _update(
        store,
        "UPDATE outbound_mail SET status = ?, last_error = ?, relay_answer = ?"
        " WHERE id = ? AND status = ?",
        (OutboundStatus.FAILED, error, answer, mail_id, OutboundStatus.SENDING),
    )


async def mark_retry(store: Store, mail_id: str, error: str, at: float) -> None:
    """This attempt failed for now: pending again, due at ``at``."""
    await _update(
        store,
        "UPDATE outbound_mail SET status = ?, last_error = ?, next_attempt_at = ?"
        " WHERE id = ? AND status = ?",
        (OutboundStatus.PENDING, error, at, mail_id, OutboundStatus.SENDING),
    )


async def defer(store: Store, mail_ids: Sequence[str], error: str, at: float) -> None:
    """The relay could not be reached for these pending mails: one attempt
    more each, due again at ``at``."""
    rows = [(error, at, mail_id, OutboundStatus.PENDING) for mail_id in mail_ids]

    async def body(db: Connection) -> None:
        await db.executemany(
            f"UPDATE outbound_mail SET {_ATTEMPT}, last_error = ?, next_attempt_at = ?"
            " WHERE id = ? AND status = ?",
            rows,
        )

    await store.transact(body)


async def _update(store: Store, sql: str, params: Params) -> int:
    """One UPDATE as a write transaction; the rows it changed."""

    async def body(db: Connection) -> int:
        return (await db.execute(sql, params)).rowcount

    return await store.transact(body)
