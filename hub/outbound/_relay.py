"""The outbox: mail that runs send to outside addresses, relayed over SMTP.

One loop, owned by the hub's task group, sends the due ``pending`` rows in
rounds of at most ``batch`` over one connection, then looks again; it sleeps
until a new row is committed (:meth:`Outbox.wake`) or the earliest retry is
due. A mail the relay did not take is tried again with the project's backoff
(per mail, by its attempts), for as long as it takes; a relay that cannot be
reached at all also holds the loop back by that backoff, so an outage costs
one connection attempt per delay, not one per mail.

A 5xx answer to a mail is final, and it bounced: in one transaction the row
becomes ``bounced`` (with the answer's enhanced status code) and its run is
given a ``bounce`` item (``hub.store.outbound.bounces``). A mail that cannot be
sent for reasons of its own, before any SMTP (an address SMTP cannot carry,
a message that cannot be built), is ``failed``, with no item. The envelope
sender of each mail is its signed bounce address (``bounces+<token>@``, the
sender's domain), where a later delivery status notification finds it
(``hub.smtp``).

Exactly once in effect, as far as SMTP allows: each attempt commits
``sending`` first and ``sent`` after the relay's 2xx, and every attempt
carries the row's Message-ID. A hub that dies between the relay's 2xx and
that commit sends the mail again after its restart, marked ``in_doubt``:
the receiving side can drop the copy by its Message-ID (docs/hub.md,
"Outbound mail"). Likewise a hub that dies between a relay's 5xx and the
bounce's commit sends the mail again after its restart; refused again, it
bounces then, once.

Each attempt builds the row's message again (``_message.py``: the same
bytes every time) and, with ``--dkim-key``, signs it (``_dkim.py``; the
signature's ``t=`` is the attempt's). Its Reply-To, unless the run gave
one, is the run's signed reply address, and its envelope sender the mail's
signed bounce address, both made with the hub's reply key, read from the
store once when the loop starts.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import re
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from runtime import Retry, Wakeup, afailpoint, tracing

from .._errors import RelayRefused, RelayUnavailable
from ..mailbox import bounce_address, reply_address
from ..store import (
    REPLY_KEY,
    SOURCE_RELAY,
    DueMail,
    OutboundStatus,
    Store,
    defer,
    due_mail,
    hub_secret,
    mark_bounced,
    mark_failed,
    mark_retry,
    mark_sending,
    mark_sent,
    next_due,
    settle_at_boot,
)
from ._config import RelayConfig
from ._message import Built, build_message

if TYPE_CHECKING:
    import aiosmtplib

    # The hub that has a signer has imported it; one without never loads dkimpy.
    from ._dkim import DkimSigner

log = logging.getLogger("mailrun.hub.outbound")

IDLE_LOOK = 60.0
"""The longest the loop sleeps without looking at the table (a safety net)."""

# "550 5.1.1 text" or "550-5.1.1 text": the RFC 3463 code after the reply code.
_ENHANCED = re.compile(r"\d{3}[ -]([245]\.\d{1,3}\.\d{1,3})(?:\s|$)")


def enhanced_status(answer: str) -> str:
    """The enhanced status code of a refusal's answer; 5.0.0 when it has none."""
    found = _ENHANCED.match(answer)
    return found[1] if found is not None else "5.0.0"


class Outbox:
    """Where the wire side hands outgoing mail (``status``, ``wake``), and the
    loop that relays it (``run``)."""

    def __init__(
        self,
        store: Store,
        relay: RelayConfig | None,
        *,
        backoff_max: float | None = None,
        dkim: DkimSigner | None = None,
    ) -> None:
        self._store = store
        self._relay = relay
        self._dkim = dkim
        self._reply_key: bytes | None = None
        # Rounds that could not reach the relay, in a row (no relay: none ever).
        self._retry = Retry(relay.backoff.capped(backoff_max) if relay is not None else None)
        self._wakeup = Wakeup()
        self.last_error: str | None = None
        self.on_accepted: Callable[[set[str]], object] | None = None
        """Who hears of the bounce items it accepted (the dispatcher's wake)."""

    @property
    def failures(self) -> int:
        """Consecutive rounds that could not reach the relay."""
        return self._retry.failures

    @property
    def status(self) -> OutboundStatus:
        return OutboundStatus.PENDING if self._relay is not None else OutboundStatus.NO_RELAY

    def wake(self) -> None:
        self._wakeup.set()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Settle what the previous hub left, then relay until cancelled (without
        a relay: return once settled; the mail waits as ``no_relay``)."""
        moved = await settle_at_boot(self._store, relayed=self._relay is not None)
        if self._relay is not None:
            # Signs each mail's Reply-To and its envelope sender (bounce address).
            self._reply_key = await self._store.transact(partial(hub_secret, name=REPLY_KEY))
        if moved["in_doubt"]:
            log.warning(
                "%d outgoing mail(s) were being sent when the hub stopped: sending again"
                " with the same Message-ID (the relay may have them already)",
                moved["in_doubt"],
            )
        task_status.started()
        if self._relay is None:
            log.info("no --smtp-relay: mail to outside addresses is kept as no_relay")
            return
        log.info("outbound relay %s (starttls=%s)", self._relay.address, self._relay.starttls)
        while True:
            # Rows committed after this point wake the next look.
            self._wakeup.clear()
            try:
                mails = await due_mail(self._store, now=time.time(), limit=self._relay.batch)
                if not mails:
                    await self._idle()
                    continue
                reached = await self._round(self._relay, mails)
            except Exception as exc:
                # The store failing (locked, disk full) is a failed round too.
                log.exception("an outbound round failed")
                self.last_error, reached = f"{type(exc).__name__}: {exc}", False
            if reached:
                self._retry.succeeded()
            else:
                await self._hold_back()

    async def _idle(self) -> None:
        due = await next_due(self._store)
        wait = IDLE_LOOK if due is None else min(IDLE_LOOK, max(0.0, due - time.time()))
        await self._wakeup.wait(wait)

    async def _hold_back(self) -> None:
        self._retry.failed()
        # Not cut short by new mail: an unreachable relay is not tried faster
        # for being needed more.
        await self._retry.wait()

    async def _round(self, relay: RelayConfig, mails: list[DueMail]) -> bool:
        """Send ``mails`` over one connection; False when the relay could not
        be reached (or the connection broke)."""
        # aiosmtplib is loaded by the first round of a hub that relays, not by
        # every hub at its start (docs/performance.md, "A `mailrun` process's start").
        from ._smtp import relay_session

        try:
            async with relay_session(relay) as smtp:
                for mail in mails:
                    if not await self._send(smtp, mail):
                        return False
        except RelayUnavailable as exc:
            self._unreachable(str(exc))
            await defer(self._store, [m.id for m in mails], str(exc), self._retry_at(0))
            return False
        return True

    async def _send(self, smtp: aiosmtplib.SMTP, mail: DueMail) -> bool:
        """One mail; False when the connection is no good for the next."""
        from ._smtp import transmit  # loaded by _round

        try:
            message = await anyio.to_thread.run_sync(self._message, mail)
        except (ValueError, TypeError) as exc:
            if await mark_sending(self._store, mail.id):
                await mark_failed(self._store, mail.id, f"invalid_mail: {exc}", None)
            return True
        if not await mark_sending(self._store, mail.id):
            return True  # no longer pending
        try:
            envelope_from = bounce_address(self._reply_key or b"", mail.sender, mail.id)
            with (
                tracing.spans.relaying(mail.message_id, mail.recipient)
                if tracing.on
                else tracing.OFF
            ):
                answer = await transmit(smtp, envelope_from, message)
        except RelayRefused as exc:
            log.warning("relay refused %s to %s: %s", mail.message_id, mail.recipient, exc.detail)
            if not exc.answer:  # not the relay's answer: the mail's own fault
                await mark_failed(self._store, mail.id, exc.detail, None)
                return True
            await self._bounced(mail, exc)
            return True
        except RelayUnavailable as exc:
            log.warning("relay did not take %s: %s", mail.message_id, exc.detail)
            await mark_retry(self._store, mail.id, exc.detail, self._retry_at(mail.attempts + 1))
            self.last_error = exc.detail
            return smtp.is_connected
        # Accepted by the relay, not yet recorded: the window a crash leaves
        # (the mail goes again, with this Message-ID, marked in_doubt).
        await afailpoint("hub.relay.after_send")
        await mark_sent(self._store, mail.id, answer)
        log.info("relayed %s to %s: %s", mail.message_id, mail.recipient, answer)
        return True

    def _message(self, mail: DueMail) -> Built:
        """The message of ``mail``, signed (a worker thread's work: a large
        attachment or an RSA signature is not the event loop's)."""
        reply = None
        if self._reply_key is not None and "@" in mail.sender:
            reply = reply_address(self._reply_key, mail.sender, mail.id)
        built = build_message(mail, reply)
        if self._dkim is None:
            return built
        return dataclasses.replace(built, data=self._dkim.sign(built.data, built.from_domain))

    async def _bounced(self, mail: DueMail, refusal: RelayRefused) -> None:
        # Refused, not yet recorded: a crash here sends the mail again after
        # the restart, and its refusal then bounces it, once.
        await afailpoint("hub.relay.after_refusal")
        bounced = await mark_bounced(
            self._store,
            mail.id,
            source=SOURCE_RELAY,
            status=enhanced_status(refusal.answer),
            diagnostic=refusal.answer,
            error=refusal.detail,
        )
        if bounced is not None and bounced.woken and self.on_accepted is not None:
            result = self.on_accepted(bounced.woken)
            if inspect.isawaitable(result):
                await result

    def _unreachable(self, error: str) -> None:
        self.last_error = error
        log.warning("outbound relay: %s (attempt %d)", error, self._retry.failures + 1)

    def _retry_at(self, attempts: int) -> float:
        return time.time() + self._retry.backoff.delay(max(attempts, self._retry.failures + 1))
