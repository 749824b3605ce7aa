"""A bounce recorded: the outbox row marked ``bounced`` and its run's
``bounce`` item accepted, in the caller's one write transaction.

Either the relay refused the mail for good while the hub handed it over
(source ``relay``: the row is ``sending``), or a delivery status
notification came back later to the mail's bounce address (source ``dsn``:
the row is ``sent``, or waiting to go again). The row's move is
conditional: only the transaction that moved it accepts the item, so a
report that comes twice, or after the relay's refusal, is recorded once;
and the item's message id (``bounce:<row id>``) is one per mail through the
accept path as well. A run that has ended refuses the item there; the row
is ``bounced`` all the same.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Final

import msgspec

from runtime.wire import BOUNCE_KIND, BounceReport

from ..accepting import Accepted, Outcome, Trigger, accept_triggers
from ..base import Store
from ..sql import Tx, sql
from .outbox import OutboundStatus

log = logging.getLogger("mailrun.hub.bounces")

SOURCE_RELAY: Final = "relay"
SOURCE_DSN: Final = "dsn"

_FROM: Final = {
    SOURCE_RELAY: (OutboundStatus.SENDING,),
    # A report for a mail the hub means to send again (in doubt) stops that.
    SOURCE_DSN: (OutboundStatus.SENT, OutboundStatus.PENDING, OutboundStatus.SENDING),
}

_ROW = sql(
    "SELECT deployment_id, run_id, message_id, recipient, status FROM outbound_mail WHERE id = ?"
)
_BOUNCED = sql(
    "UPDATE outbound_mail SET status = ?, bounce_source = ?, bounce_status = ?,"
    " bounce_diagnostic = ?, bounced_at = ?, body = NULL,"
    " relay_answer = COALESCE(?, relay_answer), last_error = COALESCE(?, last_error)"
    " WHERE id = ? AND status = ?"
)


@dataclass
class Bounced:
    """What a recorded bounce did: its report, and the item's outcome (an
    ``Accepted``, or the run's refusal: it ended)."""

    report: BounceReport
    outcome: Outcome
    woken: set[str] = field(default_factory=set)

    @property
    def delivered(self) -> bool:
        return isinstance(self.outcome, Accepted)


def bounce_message_id(row_id: str) -> str:
    """The message id of the ``bounce`` item of outbox row ``row_id``."""
    return f"bounce:{row_id}"


def record_bounce(
    tx: Tx,
    row_id: str,
    *,
    source: str,
    status: str,
    diagnostic: str,
    now: float,
    recipient: str | None = None,
    error: str | None = None,
) -> Bounced | None:
    """Inside a write transaction: mark row ``row_id`` bounced and accept its
    run's ``bounce`` item. None when the row is not one this source can
    bounce (unknown, bounced already, never handed over)."""
    row = tx.fetch_one(_ROW, (row_id,))
    if row is None or row[4] not in _FROM[source]:
        return None
    deployment_id, run_id, message_id, row_recipient, was = (str(v) for v in row)
    answer = diagnostic if source == SOURCE_RELAY else None
    moved = tx.execute(
        _BOUNCED,
        (
            OutboundStatus.BOUNCED, source, status, diagnostic, now, answer, error,
            row_id, was,
        ),
    )  # fmt: skip
    if moved != 1:
        return None
    report = BounceReport(
        message_id=message_id,
        recipient=recipient or row_recipient,
        status=status,
        diagnostic=diagnostic,
        source=source,
        bounced_at=now,
    )
    trigger = Trigger(
        deployment_id=deployment_id,
        run_id=run_id,
        kind=BOUNCE_KIND,
        message_id=bounce_message_id(row_id),
        subject=message_id,
        body=msgspec.json.encode(report),
    )
    (outcome,), woken = accept_triggers(tx, [trigger])
    if not isinstance(outcome, Accepted):
        reason = outcome.reason
        log.info("bounce of %s not delivered to run %s: %s", message_id, run_id, reason)
    return Bounced(report, outcome, woken)


async def mark_bounced(
    store: Store,
    row_id: str,
    *,
    source: str,
    status: str,
    diagnostic: str,
    recipient: str | None = None,
    error: str | None = None,
) -> Bounced | None:
    """:func:`record_bounce` as its own write transaction, now."""
    return await store.transact(
        partial(
            record_bounce,
            row_id=row_id,
            source=source,
            status=status,
            diagnostic=diagnostic,
            now=time.time(),
            recipient=recipient,
            error=error,
        )
    )
