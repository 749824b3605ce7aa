"""Delivery status notifications (RFC 3464) at the hub's bounce addresses:
a mail the relay took and a receiver refused later comes back to its
envelope sender, ``bounces+<token>@domain``, and reaches the run that sent it.

RCPT takes a bounce address only with a token this hub signed (else ``550
5.1.1``: nothing of a forged report is read). DATA reads the report with
the standard library's ``email`` package: a ``multipart/report;
report-type=delivery-status`` whose ``message/delivery-status`` part has a
block per recipient (``Final-Recipient``, ``Action``, ``Status``,
``Diagnostic-Code``). The token names the outbox row; a recipient block
with ``Action: failed`` bounces it (``hub.store.outbound.bounces``: the row
``bounced`` and the run's ``bounce`` item, in one transaction, once).
``delayed``, ``delivered``, ``relayed`` and ``expanded`` are logged and
kept nowhere.

A bounce processor must not bounce: a message that is no report, or one
that cannot be read, is answered 250 and dropped with a log line. Only the
store failing is a 451 (the sender keeps the report and tries again, and a
report taken twice still bounces its mail once).
"""

from __future__ import annotations

import email.policy
import inspect
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import Message
from email.parser import BytesParser, HeaderParser
from functools import partial

from ..intake import Acceptor
from ..mailbox import bounce_row, is_bounce_address
from ..store import REPLY_KEY, SOURCE_DSN, Store, hub_secret, mark_bounced
from ._message import one_line

log = logging.getLogger("mailrun.hub.smtp.bounces")

_PARSER = BytesParser(policy=email.policy.default)
_STATUS = re.compile(r"[245]\.\d{1,3}\.\d{1,3}")
_DIAGNOSTIC_LIMIT = 1000


@dataclass(frozen=True)
class FailedRecipient:
    """One recipient block of a report with ``Action: failed``."""

    recipient: str
    status: str
    diagnostic: str


@dataclass(frozen=True)
class DeliveryReport:
    """What a delivery status notification says: the recipients it failed
    for, the other actions it reported, and the original's Message-ID."""

    failures: list[FailedRecipient]
    others: list[str]
    message_id: str | None


def _field(block: Message, name: str) -> str:
    try:
        value = block.get(name)
    except Exception:  # hostile input: email's header parsers raise a variety
        return ""
    return "" if value is None else one_line(str(value))


def _typed(value: str) -> str:
    """``rfc822; a@b.c`` -> ``a@b.c``; ``smtp; 550 ...`` -> ``550 ...``."""
    kind, semicolon, rest = value.partition(";")
    return rest.strip() if semicolon and " " not in kind.strip() else value


def _original_id(part: Message) -> str | None:
    """The Message-ID of the returned original (message/rfc822, or its headers)."""
    if part.get_content_type() == "text/rfc822-headers":
        payload = part.get_payload(decode=True)
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
        headers: Message = HeaderParser(policy=email.policy.default).parsestr(text)
    else:
        inner = _parts(part.get_payload())
        if not inner:
            return None
        headers = inner[0]
    return _field(headers, "Message-ID") or None


def _parts(payload: object) -> list[Message]:
    return [p for p in payload if isinstance(p, Message)] if isinstance(payload, list) else []


def _text_blocks(text: str) -> list[Message]:
    chunks = re.split(r"\r?\n[ \t]*\r?\n", text.strip())
    header = HeaderParser(policy=email.policy.default)
    return [header.parsestr(chunk) for chunk in chunks if chunk.strip()]


def _blocks(part: Message) -> list[Message]:
    """The field blocks of a delivery-status part: ``email`` parses those of
    message/delivery-status; message/global-delivery-status it reads as one
    message, the first block its headers and the others its body."""
    blocks: list[Message] = []
    for parsed in _parts(part.get_payload()):
        blocks.append(parsed)
        rest = parsed.get_payload()
        if isinstance(rest, str) and rest.strip():
            blocks += _text_blocks(rest)
    return blocks


def read_report(raw: bytes) -> DeliveryReport | None:
    """The report ``raw`` is; None when it is not a delivery status report."""
    message = _PARSER.parsebytes(raw)
    if message.get_content_type() != "multipart/report":
        return None
    if str(message.get_param("report-type", "")).lower() != "delivery-status":
        return None
    failures: list[FailedRecipient] = []
    others: list[str] = []
    message_id = None
    for part in _parts(message.get_payload()):
        kind = part.get_content_type()
        if kind in ("message/rfc822", "message/global", "text/rfc822-headers"):
            message_id = message_id or _original_id(part)
        if kind not in ("message/delivery-status", "message/global-delivery-status"):
            continue
        # The first block is the report's own fields; a block per recipient follows.
        for block in _blocks(part)[1:]:
            action = _field(block, "Action").lower()
            recipient = _typed(
                _field(block, "Final-Recipient") or _field(block, "Original-Recipient")
            )
            if action != "failed":
                others.append(f"{action or '?'} for {recipient or '?'}")
                continue
            status = _STATUS.search(_field(block, "Status"))
            diagnostic = _typed(_field(block, "Diagnostic-Code"))[:_DIAGNOSTIC_LIMIT]
            failures.append(
                FailedRecipient(recipient, status[0] if status else "5.0.0", diagnostic)
            )
    return DeliveryReport(failures, others, message_id)


class BounceIntake:
    """The SMTP handler's side door for reports: which recipients are bounce
    addresses (``rcpt``, ``split``), and what a report to them does (``take``)."""

    def __init__(self, store: Store, acceptor: Acceptor) -> None:
        self._store = store
        self._acceptor = acceptor  # its on_accepted: the dispatcher's wake
        self._key: bytes | None = None

    async def _reply_key(self) -> bytes:
        if self._key is None:
            self._key = await self._store.transact(partial(hub_secret, name=REPLY_KEY))
        return self._key

    async def rcpt(self, address: str) -> str | None:
        """The answer to RCPT for a bounce address; None for any other address."""
        if not is_bounce_address(address):
            return None
        if bounce_row(await self._reply_key(), address) is None:
            shown = address.encode("ascii", "replace").decode()[:200]
            return f"550 5.1.1 <{shown}>: no such bounce address"
        return "250 2.1.5 OK"

    def split(self, rcpts: Sequence[str]) -> tuple[list[str], list[str]]:
        """``rcpts`` as (the other recipients, the outbox rows the bounce addresses name)."""
        if self._key is None:
            return list(rcpts), []  # no RCPT took a bounce address
        others: list[str] = []
        rows: list[str] = []
        for rcpt in rcpts:
            row = bounce_row(self._key, rcpt) if is_bounce_address(rcpt) else None
            if row is None:
                others.append(rcpt)
            elif row not in rows:
                rows.append(row)
        return others, rows

    async def take(self, raw: bytes, rows: Sequence[str]) -> None:
        """Bounce ``rows`` by the report ``raw``, when it says they failed."""
        try:
            report = read_report(raw)
        except Exception:  # hostile input: never a reason to answer with an error
            log.warning("unreadable report to the bounce address of %s: dropped", rows[0])
            return
        if report is None:
            log.warning("mail to the bounce address of %s is no delivery report: dropped", rows[0])
            return
        for row in rows:
            await self._take_one(row, report)

    async def _take_one(self, row: str, report: DeliveryReport) -> None:
        if report.others:
            log.info("report on %s: %s (not kept)", row, "; ".join(report.others))
        if not report.failures:
            return
        # A report names the one mail its token signs: its first failure is that mail's.
        failure = report.failures[0]
        bounced = await mark_bounced(
            self._store,
            row,
            source=SOURCE_DSN,
            status=failure.status,
            diagnostic=failure.diagnostic,
            recipient=failure.recipient or None,
        )
        if bounced is None:
            log.info("report on %s: bounced already (or never sent), dropped", row)
            return
        if report.message_id and report.message_id != bounced.report.message_id:
            log.info(
                "report on %s names %s, the mail was %s (the token decides)",
                row,
                report.message_id,
                bounced.report.message_id,
            )
        log.info("%s bounced (dsn %s): %s", row, failure.status, failure.diagnostic)
        wake = self._acceptor.on_accepted
        if bounced.woken and wake is not None:
            result = wake(bounced.woken)
            if inspect.isawaitable(result):
                await result
