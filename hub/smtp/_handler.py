"""What the hub answers to RCPT and DATA: aiosmtpd's handler hooks.

RCPT looks the address up (committed data, ``address_status``): an
address no live deployment holds is refused there, 550 5.1.1, before the
client sends the message. DATA parses the message once and makes one mail
per recipient, and all of them go through ``hub.intake.accept_mails``, the
batch path of ``POST /mail/batch`` and the NATS ingress, as a whole: one
transaction, and every recipient accepted or none (a deployment deleted
between RCPT and DATA refuses the message, not one copy of it). ``250`` is written only
after that returned; a failure of the transaction (store unavailable, hub
stopping) is a 451 that the client retries, and a retry with the same
``Message-ID`` is answered by the first receipt, so it counts once.

Who may write (docs/smtp.md, "Who may write"): RCPT refuses an envelope
sender the recipient's deployment does not take (``550 5.7.1``); DATA
checks the sender (``senders.SenderChecks``: SPF, DKIM, DMARC, or a trusted
relay's verdicts), refuses the message (``550 5.7.1``) when a recipient's
deployment requires a DMARC pass it did not get, and the accepting
transaction holds the From header to the allow and deny lists.
Bounce addresses (``bounces+<token>@``) are a side door (``_bounces``):
RCPT and DATA hand them to :class:`BounceIntake` before anything else.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from runtime import Flag, tracing
from runtime.wire import IngressMail

from .._errors import HubError
from ..intake import Acceptor, accept_mails
from ..store import WITH_OTHERS, Accepted, AddressStatus, Receipt, Store, address_status
from ._bounces import BounceIntake
from ._config import SmtpConfig
from ._message import parse_message
from ._replies import NotTaken, ok_reply, outcome_reply, refusal_reply
from .senders import SenderChecks, dmarc_refusal, envelope_refusal

log = logging.getLogger("mailrun.hub.smtp")

_RCPT_REFUSAL = {
    AddressStatus.UNKNOWN: "550 5.1.1 <{}>: no deployment has this address",
    AddressStatus.DELETED: "550 5.1.1 <{}>: its deployment is deleted",
    AddressStatus.ENDED: "550 5.2.1 <{}>: its deployment's run has ended",
}


class SmtpHandler:
    """One per server; aiosmtpd calls the ``handle_*`` hooks per session,
    each with the session's public ``Session`` and ``Envelope``."""

    def __init__(
        self, store: Store, acceptor: Acceptor, config: SmtpConfig, *, max_body: int
    ) -> None:
        self._store = store
        self._acceptor = acceptor
        self._config = config
        self._max_body = max_body
        self.senders = SenderChecks(config.dns_server, config.trusted_relays)
        self._bounces = BounceIntake(store, acceptor)
        self.stopping = False  # the server is closing: no message is taken any more
        self._in_hooks = 0  # RCPT lookups and messages between their "." and their answer
        self.idle = Flag(True)
        """Set while no hook is under way: the server waits for it as it stops."""

    @contextmanager
    def _hook(self) -> Iterator[None]:
        self._in_hooks += 1
        self.idle.clear()
        try:
            yield
        finally:
            self._in_hooks -= 1
            if self._in_hooks == 0:
                self.idle.set()

    async def handle_EHLO(
        self, server: SMTP, session: Session, envelope: Envelope, hostname: str, lines: list[str]
    ) -> list[str]:
        # aiosmtpd sets the host name only when no hook answers EHLO.
        session.host_name = hostname
        if not self._config.auth:
            # Nothing to log in with: an advertised AUTH could only fail.
            lines = [line for line in lines if not line[4:].startswith("AUTH")]
        return lines

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        wanted = address.strip().lower()
        if wanted in (r.lower() for r in envelope.rcpt_tos):
            return "250 2.1.5 OK (already a recipient)"  # one trigger per deployment
        if len(envelope.rcpt_tos) >= self._config.max_recipients:
            # 452: the client sends the rest in another transaction.
            return f"452 4.5.3 Too many recipients (at most {self._config.max_recipients})"
        try:
            with self._hook():
                # Reports to a bounce address: the bounce intake's.
                bounce = await self._bounces.rcpt(address)
                if bounce is not None:
                    if bounce.startswith("250"):
                        envelope.rcpt_tos.append(address)
                    return bounce
                status = await self._store.read(partial(address_status, address=wanted))
        except Exception:
            log.exception("RCPT lookup of %r failed", wanted)
            return "451 4.3.0 Cannot look the address up now, try again later"
        if status is not AddressStatus.LIVE:
            return _RCPT_REFUSAL[status].format(_printable(address))
        with self._hook():
            refused = await envelope_refusal(self._store, wanted, envelope.mail_from)
        if refused is not None:
            return refused
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        if self.stopping:
            return "451 4.3.2 Service shutting down, try again later"
        with self._hook():
            rcpts, bounced = self._bounces.split(envelope.rcpt_tos)
            if bounced:
                try:
                    await self._bounces.take(envelope.original_content or b"", bounced)
                except Exception:
                    log.exception("a report to a bounce address was not recorded")
                    return "451 4.3.0 Not recorded, try again later"
                if not rcpts:
                    return "250 2.0.0 Report taken"
            return await self._deliver(session, envelope, rcpts)

    async def _deliver(self, session: Session, envelope: Envelope, rcpts: list[str]) -> str:
        raw = envelope.original_content or b""
        parsed = parse_message(raw, envelope.mail_from)
        body = parsed.text.encode("utf-8")
        if len(body) > self._max_body:
            return f"552 5.3.4 Message text of {len(body)} bytes exceeds {self._max_body}"
        peer = session.peer[0] if isinstance(session.peer, tuple) else ""
        auth = None
        if self._config.checks_senders:
            auth = await self.senders.verify(
                raw,
                peer_ip=str(peer),
                helo=session.host_name or "",
                mail_from=envelope.mail_from or "",
            )
        if (refused := await dmarc_refusal(self._store, rcpts, auth)) is not None:
            log.warning("SMTP message refused: %s", refused)
            return refused
        mails: Sequence[IngressMail] = [
            IngressMail(
                to=rcpt,
                sender=parsed.sender,
                subject=parsed.subject,
                body=parsed.text,
                message_id=parsed.message_id,
                in_reply_to=parsed.in_reply_to,
                references=list(parsed.references),
            )
            for rcpt in rcpts
        ]
        try:
            with tracing.spans.smtp_ingress(str(peer), len(mails)) if tracing.on else tracing.OFF:
                outcomes = await accept_mails(
                    self._acceptor, mails, max_body=self._max_body, whole=True, raw=raw, auth=auth
                )
        except HubError as exc:
            # Nothing committed: the client keeps the message and retries.
            log.warning("SMTP message not accepted: %s: %s", exc.reason, exc.detail)
            return f"451 4.3.0 Not accepted, try again later ({exc.reason})"
        except Exception:
            log.exception("SMTP message not accepted")
            return "451 4.3.0 Not accepted, try again later"
        return _answer(rcpts, outcomes)

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        """aiosmtpd's authenticator (PLAIN, LOGIN): the configured login, compared
        in constant time."""
        config = self._config
        ok = (
            isinstance(data, LoginPassword)
            and config.username is not None
            and config.password is not None
            and hmac.compare_digest(data.login, config.username.encode())
            and hmac.compare_digest(data.password, config.password.encode())
        )
        if not ok:
            log.warning("SMTP login refused from %s", session.peer)
        return AuthResult(success=ok, handled=False)


def _answer(rcpts: list[str], outcomes: list[Receipt | HubError]) -> str:
    """250 when the message was accepted for every recipient; else (nothing
    accepted) the refusals, one that may pass (4xx) first: the client then
    keeps the whole message and sends it again."""
    accepted = [o for o in outcomes if isinstance(o, Accepted)]
    if len(accepted) == len(outcomes):
        return ok_reply(accepted)
    refused = [
        NotTaken(rcpt, *outcome_reply(o))
        for rcpt, o in zip(rcpts, outcomes, strict=True)
        if not isinstance(o, Accepted) and o.reason != WITH_OTHERS
    ]
    refused.sort(key=lambda r: not r.code.startswith("4"))
    log.warning(
        "SMTP message refused for %d of %d recipients: %s",
        len(refused),
        len(rcpts),
        ", ".join(f"{r.rcpt} ({r.reason})" for r in refused),
    )
    return refusal_reply(refused)


def _printable(address: str) -> str:
    return address.encode("ascii", "replace").decode()[:200]
