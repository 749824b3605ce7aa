"""Outgoing mail: the ``outbound_mail`` table, its statuses, the rows a run's
mail becomes, and the reads of ``GET /outbox``.

A run's mail to an address no deployment holds is a row here, inserted in
the transaction that ingests its MailSent event, once per mail: the event id
is unique, and so is the mail's key in its deployment (the sidecar derives
it from the dispatch that sent it, so a takeover that processes that
dispatch again sends the same mail). The relay (``hub.outbound``) takes the
rows from there; its writes are in ``relaying.py``. The rich parts of a mail
(html, Cc, attachments, ...) are in the row's ``spec`` (``spec.py``).
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgspec

from runtime import new_id

from ..sql import Tx, sql
from .spec import BARE_ADDRESS, PLAIN, OutboundSpec, encode_spec, spec_problem


class OutboundStatus(StrEnum):
    """An outgoing mail's life: pending -> sending -> sent, or failed; no_relay
    while the hub has no relay; bounced when the relay refused it for good, or
    a delivery status notification said it failed (from sent, too)."""

    PENDING = "pending"  # waiting for the relay; tried again at next_attempt_at
    SENDING = "sending"  # an SMTP transaction is under way
    SENT = "sent"  # the relay accepted it (relay_answer, sent_at)
    FAILED = "failed"  # refused for good (a 5xx answer), or not a mail that can be sent
    NO_RELAY = "no_relay"  # the hub runs without --smtp-relay: kept until one with it starts
    BOUNCED = "bounced"  # refused for good by the relay (5xx) or by a DSN (bounce_*)


OUTBOUND_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbound_mail (
  id              TEXT PRIMARY KEY,
  deployment_id   TEXT NOT NULL,
  run_id          TEXT NOT NULL,
  event_id        TEXT NOT NULL UNIQUE,
  send_key        TEXT NOT NULL,
  message_id      TEXT NOT NULL,
  sender          TEXT NOT NULL,
  recipient       TEXT NOT NULL,
  subject         TEXT NOT NULL,
  body            BLOB,
  body_size       INTEGER NOT NULL,
  status          TEXT NOT NULL,
  attempts        INTEGER NOT NULL DEFAULT 0,
  in_doubt        INTEGER NOT NULL DEFAULT 0,
  last_error      TEXT,
  relay_answer    TEXT,
  next_attempt_at REAL NOT NULL,
  created_at      REAL NOT NULL,
  sent_at         REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS outbound_mail_send_key ON outbound_mail (deployment_id, send_key);
CREATE INDEX IF NOT EXISTS outbound_mail_due ON outbound_mail (status, next_attempt_at);
CREATE INDEX IF NOT EXISTS outbound_mail_by_deployment ON outbound_mail (deployment_id, created_at);
"""


def add_outbound_mail(conn: sqlite3.Connection) -> None:
    """Migration 8: the table of outgoing mail. Idempotent on its own."""
    for statement in filter(None, (s.strip() for s in OUTBOUND_SCHEMA.split(";"))):
        conn.execute(statement)


@dataclass(frozen=True)
class OutboundMail:
    """One mail a run sent to an address no deployment holds."""

    deployment_id: str
    run_id: str
    event_id: str
    send_key: str
    sender: str
    recipient: str
    subject: str
    body: bytes
    header_id: str | None = None
    """The ``Message-ID`` the sidecar made for it (``MailSent.header_id``);
    None (an older sidecar): :func:`header_message_id`."""
    spec: OutboundSpec = PLAIN

    @property
    def message_id(self) -> str:
        """The ``Message-ID`` header the mail carries on every attempt."""
        return self.header_id or header_message_id(self.event_id, self.sender)


def header_message_id(event_id: str, sender: str) -> str:
    """The ``Message-ID`` of the mail an event sent: its id at the sender's
    domain (the hub's mail domain when the deployment was made). Stored with
    the row, so every attempt, before and after any restart, carries it."""
    domain = sender.rpartition("@")[2] or "mailrun.local"
    return f"<{event_id}@{domain}>"


def unsendable(mail: OutboundMail) -> str | None:
    """Why ``mail`` can never be handed to a relay (None: it can)."""
    if BARE_ADDRESS.fullmatch(mail.recipient) is None:
        return f"invalid_address: {mail.recipient[:200]!r} is not one bare mail address"
    if any(c in mail.subject for c in "\r\n\0"):
        return "invalid_mail: the subject is not one line"
    if mail.header_id is not None and _HEADER_ID.fullmatch(mail.header_id) is None:
        return f"invalid_mail: Message-ID {mail.header_id[:200]!r} is not one <message-id>"
    return spec_problem(mail.spec)


_HEADER_ID = re.compile(r"<[^<>\s]+@[^<>\s]+>")
_RECORD = sql(
    "INSERT INTO outbound_mail (id, deployment_id, run_id, event_id, send_key,"
    " message_id, sender, recipient, subject, body, body_size, status, last_error,"
    " next_attempt_at, created_at, spec)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT DO NOTHING"
)


def record_outbound(tx: Tx, mails: Sequence[OutboundMail], status: OutboundStatus) -> int:
    """Insert each mail not recorded yet (inside the caller's transaction), as
    ``status`` or, for a mail no relay could take, ``failed``; return how many
    rows are new."""
    now = time.time()
    inserted = 0
    for mail in mails:
        why = unsendable(mail)
        inserted += tx.execute(
            _RECORD,
            (
                new_id("out"), mail.deployment_id, mail.run_id, mail.event_id, mail.send_key,
                mail.message_id, mail.sender, mail.recipient,
                mail.subject, mail.body, len(mail.body),
                OutboundStatus.FAILED if why else status, why, now, now, encode_spec(mail.spec),
            ),
        )  # fmt: skip
    return inserted


class OutboundView(msgspec.Struct, kw_only=True):
    """An outgoing mail as ``GET /outbox`` shows it (without its body)."""

    id: str
    deployment_id: str
    run_id: str
    event_id: str
    message_id: str
    sender: str
    to: str
    subject: str
    body_size: int
    status: str
    attempts: int
    in_doubt: bool
    last_error: str | None
    relay_answer: str | None
    next_attempt_at: float | None
    created_at: float
    sent_at: float | None
    bounce_source: str | None = None  # bounced: "relay" or "dsn"
    bounce_status: str | None = None  # bounced: the RFC 3463 status ("5.1.1")
    bounce_diagnostic: str | None = (
        None  # bounced: the relay's answer, the report's Diagnostic-Code
    )
    bounced_at: float | None = None


_VIEW = """
SELECT id, deployment_id, run_id, event_id, message_id, sender, recipient, subject, body_size,
       status, attempts, in_doubt, last_error, relay_answer, next_attempt_at, created_at, sent_at,
       bounce_source, bounce_status, bounce_diagnostic, bounced_at
FROM outbound_mail"""
_LATEST = " ORDER BY created_at DESC, rowid DESC LIMIT ?"
# One statement per filter, each searching its index.
_LATEST_ALL = sql(_VIEW + _LATEST)
_LATEST_IN = sql(_VIEW + " WHERE status = ?" + _LATEST)
_LATEST_OF = sql(_VIEW + " WHERE deployment_id = ?" + _LATEST)
_LATEST_OF_IN = sql(_VIEW + " WHERE deployment_id = ? AND status = ?" + _LATEST)
_COUNTS = sql("SELECT status, COUNT(*) FROM outbound_mail GROUP BY 1")
_WAITING = (OutboundStatus.PENDING, OutboundStatus.SENDING)


def _view(row: Any) -> OutboundView:
    fields = dict(zip(OutboundView.__struct_fields__, row, strict=True))
    fields["in_doubt"] = bool(fields["in_doubt"])
    if fields["status"] not in _WAITING:
        fields["next_attempt_at"] = None  # nothing is due for it
    return OutboundView(**fields)


def list_outbound(
    tx: Tx,
    *,
    status: str | None = None,
    deployment_id: str | None = None,
    limit: int = 100,
) -> list[OutboundView]:
    """The latest ``limit`` outgoing mails (filtered), oldest first."""
    if deployment_id is None and status is None:
        rows = tx.fetch_all(_LATEST_ALL, (limit,))
    elif deployment_id is None:
        rows = tx.fetch_all(_LATEST_IN, (status, limit))
    elif status is None:
        rows = tx.fetch_all(_LATEST_OF, (deployment_id, limit))
    else:
        rows = tx.fetch_all(_LATEST_OF_IN, (deployment_id, status, limit))
    return [_view(row) for row in reversed(rows)]


def count_outbound(tx: Tx) -> dict[str, int]:
    """Outgoing mail by status, every status named (0 when none)."""
    counts = {str(s): int(n) for s, n in tx.fetch_all(_COUNTS)}
    return {s.value: counts.get(s.value, 0) for s in OutboundStatus} | counts
