"""VERP bounce addresses: the envelope sender (``MAIL FROM``) of every mail
the hub relays is ``bounces+<token>@<domain of its sender>``, so that a
delivery status notification coming back names the one mail it is about.

The token is a reply token (``reply_tokens``) signed for the base address
``bounces@<domain>`` with the same key: a report sent to a made-up or
altered token, or to one of another domain, names no mail, and a forged
report cannot bounce somebody else's mail.
"""

from __future__ import annotations

from typing import Final

from .addresses import parse_address
from .reply_tokens import is_reply_token, reply_token, verify_token

BOUNCE_NAME: Final = "bounces"
"""The local part of every bounce address (before its ``+token``)."""


def bounce_address(key: bytes, sender: str, row_id: str) -> str:
    """The envelope sender of outbox row ``row_id``, sent from ``sender``."""
    domain = sender.rpartition("@")[2].lower() or "mailrun.local"
    base = f"{BOUNCE_NAME}@{domain}"
    return f"{BOUNCE_NAME}+{reply_token(key, base, row_id)}@{domain}"


def is_bounce_address(address: str) -> bool:
    """Whether ``address`` has a bounce address's shape (it may still not verify)."""
    parsed = parse_address(address)
    return (
        parsed.base.partition("@")[0] == BOUNCE_NAME
        and parsed.tag is not None
        and is_reply_token(parsed.tag)
    )


def bounce_row(key: bytes, address: str) -> str | None:
    """The outbox row id a bounce address names, if this hub signed it; else None."""
    parsed = parse_address(address)
    if parsed.tag is None or parsed.base.partition("@")[0] != BOUNCE_NAME:
        return None
    return verify_token(key, parsed.base, parsed.tag)
