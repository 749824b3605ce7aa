"""One connection to the relay (aiosmtplib), and one mail over it.

What the relay answers decides what happens to a mail: 2xx to DATA is
accepted; a 5xx to MAIL, RCPT or DATA refuses that mail for good
(:class:`RelayRefused`); anything else (no connection, a timeout, a 4xx,
STARTTLS or login refused, which are the relay's state and not the mail's) is
:class:`RelayUnavailable`, tried again later.
"""

from __future__ import annotations

import contextlib
import email.policy
import email.utils
from collections.abc import AsyncIterator
from email.message import EmailMessage

import aiosmtplib

from .._errors import RelayRefused, RelayUnavailable
from ..store import DueMail
from ._config import RelayConfig

_POLICY = email.policy.SMTP  # CRLF line ends, headers folded for the wire


def build_message(mail: DueMail) -> bytes:
    """The mail as the relay gets it, the same on every attempt: its
    Message-ID and Date come from the row, not from the moment of sending."""
    message = EmailMessage(policy=_POLICY)
    message["From"] = mail.sender
    message["To"] = mail.recipient
    message["Subject"] = mail.subject
    message["Date"] = email.utils.formatdate(mail.created_at, localtime=False)
    message["Message-ID"] = mail.message_id
    try:
        message.set_content(mail.body.decode("utf-8"))
    except UnicodeDecodeError:
        message.set_content(mail.body, maintype="application", subtype="octet-stream")
    return message.as_bytes()


def answer_text(code: int, message: str) -> str:
    return f"{code} {' '.join(message.split())}"[:1000]


@contextlib.asynccontextmanager
async def relay_session(relay: RelayConfig) -> AsyncIterator[aiosmtplib.SMTP]:
    """Connected (with STARTTLS and login as configured) until the block ends."""
    smtp = aiosmtplib.SMTP(
        hostname=relay.host,
        port=relay.port,
        timeout=relay.timeout,
        start_tls=relay.starttls,
        cert_bundle=relay.ca_file,
        username=relay.username,
        password=relay.password,
        local_hostname=relay.local_hostname,
    )
    try:
        await smtp.connect()
    except aiosmtplib.SMTPResponseException as exc:
        smtp.close()
        raise RelayUnavailable(f"{relay.address}: {answer_text(exc.code, exc.message)}") from exc
    except (aiosmtplib.SMTPException, OSError) as exc:
        smtp.close()
        raise RelayUnavailable(f"{relay.address}: {_describe(exc)}") from exc
    try:
        yield smtp
    finally:
        try:
            if smtp.is_connected:
                await smtp.quit()
        except (aiosmtplib.SMTPException, OSError):
            pass  # the mails are recorded already; a QUIT lost is nothing
        finally:
            # Also when cancelled inside QUIT: no socket outlives the session.
            smtp.close()


async def transmit(
    smtp: aiosmtplib.SMTP, mail: DueMail, message: bytes, *, envelope_from: str | None = None
) -> str:
    """Hand one mail over, from ``envelope_from`` (its bounce address; else
    its sender); return the relay's answer to DATA ("250 ...")."""
    try:
        await smtp.mail(envelope_from or mail.sender)
        await smtp.rcpt(mail.recipient)
        response = await smtp.data(message)
    except aiosmtplib.SMTPResponseException as exc:
        answer = answer_text(exc.code, exc.message)
        if smtp.is_connected:
            # The next mail on this connection starts a fresh envelope.
            with contextlib.suppress(aiosmtplib.SMTPException, OSError):
                await smtp.rset()
        if 500 <= exc.code < 600:
            raise RelayRefused(f"refused: {answer}", answer) from exc
        raise RelayUnavailable(f"not now: {answer}") from exc
    except (aiosmtplib.SMTPException, OSError) as exc:
        raise RelayUnavailable(_describe(exc)) from exc
    except (UnicodeEncodeError, ValueError) as exc:
        # An address SMTP cannot carry as it is (not ASCII, say).
        raise RelayRefused(f"invalid_address: {exc}", "") from exc
    return answer_text(response.code, response.message)


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
