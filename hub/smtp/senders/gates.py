"""The SMTP answers of who may write: an envelope sender a recipient's
deployment does not take (RCPT), a message without the DMARC pass a
recipient's deployment requires (DATA). Each reads the committed settings
of the deployment the recipient reaches (``hub.store.settings_at``); a read
that fails is a 451 the client retries. The From header is not held here:
the accepting transaction holds it, as for every door."""

from __future__ import annotations

import logging

from runtime.wire import MailAuth

from ...store import MailSettings, Store, Tx, sender_refusal, settings_at

log = logging.getLogger("mailrun.hub.smtp")

_RETRY = "451 4.3.0 Cannot look the address up now, try again later"


def _printable(text: str) -> str:
    return text.encode("ascii", "replace").decode()[:300]


async def envelope_refusal(store: Store, rcpt: str, mail_from: str | None) -> str | None:
    """RCPT's answer when ``rcpt``'s deployment does not take mail from the
    envelope sender (``550 5.7.1``); None when it does."""
    try:
        settings = await store.read(lambda tx: settings_at(tx, rcpt))
    except Exception:
        log.exception("RCPT lookup of %r's mail settings failed", rcpt)
        return _RETRY
    sender = mail_from if mail_from and mail_from != "<>" else None
    refusal = None if settings is None else sender_refusal(settings, sender)
    return None if refusal is None else f"550 5.7.1 {_printable(refusal)}"


async def dmarc_refusal(store: Store, rcpts: list[str], auth: MailAuth | None) -> str | None:
    """DATA's answer when a recipient's deployment requires a DMARC pass the
    message did not get (``550 5.7.1``, the whole message; a server that does
    not check senders, ``auth`` None, gives no pass); None otherwise."""
    if auth is not None and auth.dmarc.result == "pass":
        return None

    def requiring(tx: Tx) -> list[str]:
        found = ((r, settings_at(tx, r)) for r in rcpts)
        return [r for r, s in found if isinstance(s, MailSettings) and s.require_dmarc]

    try:
        strict = await store.read(requiring)
    except Exception:
        log.exception("DATA lookup of the recipients' mail settings failed")
        return _RETRY
    if not strict:
        return None
    verdict = "not checked" if auth is None else auth.dmarc.detail or auth.dmarc.result
    return f"550 5.7.1 {_printable(f'DMARC did not pass ({verdict}) for <{strict[0]}>')}"
