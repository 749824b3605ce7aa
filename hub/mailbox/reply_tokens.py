"""Signed reply addresses: ``name+r-<token>@domain``, for replies from mail
clients that drop In-Reply-To and References.

The token names one outgoing mail (its outbox row, which names its run and
its Message-ID) and carries an HMAC-SHA256 over the deployment's address
and that row, with the hub's reply key (``hub.store.mail.REPLY_KEY``, kept
in the store so every hub of a PostgreSQL store checks alike). The token is
checked where the mail arrives: one that does not verify (forged, altered,
made with another key or for another deployment) is not a reply, and the
mail goes to ``name`` as plain mail.

Shape: ``r-`` + the row id's 26 hex digits + ``-`` + 16 hex digits of MAC
(64 bits): 45 characters, lower case, so a receiver that lower-cases the
local part does not break it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Final

PREFIX: Final = "r-"
_MAC_HEX = 16
_TOKEN = re.compile(r"r-(?P<row>[0-9a-f]{26})-(?P<mac>[0-9a-f]{16})")


def _mac(key: bytes, base_address: str, row_id: str) -> str:
    message = f"{base_address.lower()}\0{row_id}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:_MAC_HEX]


def reply_token(key: bytes, base_address: str, row_id: str) -> str:
    """The token of outbox row ``row_id`` (``out_<26 hex>``), sent from
    ``base_address`` (``name@domain``, no tag)."""
    digits = row_id.removeprefix("out_")
    return f"{PREFIX}{digits}-{_mac(key, base_address, row_id)}"


def reply_address(key: bytes, base_address: str, row_id: str) -> str:
    """``name+r-<token>@domain``: the Reply-To of the mail in row ``row_id``."""
    name, _, domain = base_address.partition("@")
    return f"{name}+{reply_token(key, base_address, row_id)}@{domain}"


def is_reply_token(tag: str) -> bool:
    """Whether ``tag`` has a reply token's shape (it may still not verify)."""
    return _TOKEN.fullmatch(tag.lower()) is not None


def verify_token(key: bytes, base_address: str, tag: str) -> str | None:
    """The outbox row id ``tag`` names, if it is a token this hub signed for
    ``base_address``; None otherwise (compared in constant time)."""
    match = _TOKEN.fullmatch(tag.lower())
    if match is None:
        return None
    row_id = "out_" + match["row"]
    if not hmac.compare_digest(match["mac"], _mac(key, base_address, row_id)):
        return None
    return row_id
