"""One connection to the relay (aiosmtplib), and one mail over it.

What the relay answers decides what happens to a mail: 2xx to DATA is
accepted; a 5xx to MAIL, to any recipient's RCPT (To or Cc: a mail goes to
all of its recipients or to none) or to DATA refuses that mail for good
(:class:`RelayRefused`); anything else (no connection, a timeout, a 4xx,
STARTTLS or login refused, which are the relay's state and not the mail's) is
:class:`RelayUnavailable`, tried again later. A mail whose addresses are not
ASCII goes with SMTPUTF8, and is refused by a relay that does not offer it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiosmtplib

from .._errors import RelayRefused, RelayUnavailable
from ._config import RelayConfig
from ._message import Built

_UTF8 = ["SMTPUTF8"]
_NO_SMTPUTF8 = "invalid_address: an address is not ASCII and the relay does not offer SMTPUTF8"


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


async def transmit(smtp: aiosmtplib.SMTP, sender: str, message: Built) -> str:
    """Hand one mail over, from ``sender`` to each of its recipients; return
    the relay's answer to DATA ("250 ...")."""
    options, encoding = (_UTF8, "utf-8") if message.smtputf8 else ([], "ascii")
    try:
        if message.smtputf8:
            if smtp.is_ehlo_or_helo_needed:
                await smtp.ehlo()  # what the relay offers is known after EHLO
            if not smtp.supports_extension("smtputf8"):
                raise RelayRefused(_NO_SMTPUTF8, "")
        await smtp.mail(sender, options=options, encoding=encoding)
        for recipient in message.recipients:
            await smtp.rcpt(recipient, encoding=encoding)
        response = await smtp.data(message.data)
    except aiosmtplib.SMTPResponseException as exc:
        answer = answer_text(exc.code, exc.message)
        if smtp.is_connected:
            # The next mail on this connection starts a fresh envelope.
            with contextlib.suppress(aiosmtplib.SMTPException, OSError):
                await smtp.rset()
        if 500 <= exc.code < 600:
            who = exc.recipient if isinstance(exc, aiosmtplib.SMTPRecipientRefused) else ""
            # Of several recipients (a Cc), the refusal says whose.
            several = who and len(message.recipients) > 1
            detail = f"refused {who}: {answer}" if several else f"refused: {answer}"
            raise RelayRefused(detail, answer, recipient=who) from exc
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
