"""DKIM signing of outgoing mail (dkimpy): ``--dkim-key`` and
``--dkim-selector``, read once where the hub starts.

One key for every sending domain (``--dkim-key FILE --dkim-selector S``:
each signature's ``d=`` is the From's domain), or a key per domain
(``--dkim-key DOMAIN=FILE --dkim-selector DOMAIN=S``, repeated), or both:
a domain's own key first, else the one without a domain. A domain's key
without a selector of its own uses the selector without a domain. Mail from
a domain that no key covers leaves unsigned. A key that cannot be read, or a
key or selector without its other half, stops the hub at start
(:class:`DkimKeyError`).

Signatures are ``rsa-sha256``, ``relaxed/relaxed``, over the headers that
say who wrote what to whom (:data:`SIGNED_HEADERS`); one the message does not
have is signed as absent, so nobody on the way can add it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import dkim

from .._errors import DkimKeyError
from ._dkim_keys import read_key

SIGNED_HEADERS: Final = (
    "From", "To", "Cc", "Subject", "Date", "Message-ID", "Reply-To", "In-Reply-To",
    "References", "MIME-Version", "Content-Type",
)  # fmt: skip
_CANONICALIZE = (b"relaxed", b"relaxed")
_DOMAIN = re.compile(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+\.?")
_SELECTOR = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


@dataclass(frozen=True)
class DkimKey:
    """One signing key: for ``domain`` (None: every domain without its own)."""

    domain: str | None
    selector: str
    path: Path
    pem: bytes = field(repr=False)

    def options(self) -> list[str]:
        """The hub options that give this key (``mailrun up`` passes them on)."""
        prefix = "" if self.domain is None else f"{self.domain}="
        return ["--dkim-key", f"{prefix}{self.path}", "--dkim-selector", f"{prefix}{self.selector}"]


@dataclass(frozen=True)
class DkimSigner:
    """The hub's DKIM keys, by domain; signs a built message."""

    keys: tuple[DkimKey, ...]

    def key_for(self, domain: str) -> DkimKey | None:
        """The key that signs mail from ``domain``: its own, else the default."""
        domain = domain.lower()
        own = next((k for k in self.keys if k.domain == domain), None)
        return own or next((k for k in self.keys if k.domain is None), None)

    def sign(self, message: bytes, domain: str) -> bytes:
        """``message`` with a DKIM-Signature for ``d=domain`` in front (as it
        is, when no key covers ``domain``); raises ``ValueError`` when dkimpy
        cannot sign it."""
        key = self.key_for(domain)
        if key is None:
            return message
        return _signature(message, key, domain) + message


def _signature(message: bytes, key: DkimKey, domain: str) -> bytes:
    try:
        header = dkim.sign(
            message,
            key.selector.encode("ascii"),
            domain.lower().encode("idna"),
            key.pem,
            canonicalize=_CANONICALIZE,
            include_headers=[h.encode("ascii") for h in SIGNED_HEADERS],
        )
    except (dkim.DKIMException, UnicodeError) as exc:
        raise ValueError(f"dkim: {exc}") from None
    return bytes(header)


def _split(option: str, value: str) -> tuple[str | None, str]:
    """``DOMAIN=REST`` -> (domain, rest); a value whose part before ``=`` is
    not a domain name is all ``REST`` (a FILE with ``=``: write ``./a=b``)."""
    head, eq, rest = value.partition("=")
    if eq and _DOMAIN.fullmatch(head):
        return head.rstrip(".").lower(), rest
    if not value:
        raise DkimKeyError(f"{option}: empty")
    return None, value


def dkim_keys(keys: Sequence[str], selectors: Sequence[str]) -> tuple[DkimKey, ...]:
    """The keys ``--dkim-key`` and ``--dkim-selector`` give, each read and
    tried; raises :class:`DkimKeyError` for anything that cannot sign."""
    paths: dict[str | None, Path] = {}
    for value in keys:
        domain, file = _split("--dkim-key", value)
        if domain in paths:
            raise DkimKeyError(f"--dkim-key given twice for {domain or 'every domain'}")
        paths[domain] = Path(file).expanduser().absolute()
    named: dict[str | None, str] = {}
    for value in selectors:
        domain, selector = _split("--dkim-selector", value)
        if _SELECTOR.fullmatch(selector) is None:
            raise DkimKeyError(f"--dkim-selector {value!r}: not a DNS name")
        if domain in named:
            raise DkimKeyError(f"--dkim-selector given twice for {domain or 'every domain'}")
        named[domain] = selector
    for domain in named:
        if domain not in paths and (domain is not None or not paths):
            raise DkimKeyError(f"--dkim-selector {named[domain]}: no --dkim-key for it")
    found = []
    for domain, path in paths.items():
        chosen = named.get(domain) or named.get(None)
        if chosen is None:
            raise DkimKeyError(f"--dkim-key {path}: no --dkim-selector for it")
        key = DkimKey(domain, chosen, path, read_key(path))
        try:  # at start, not at the first mail
            _signature(b"From: a@example.org\r\nSubject: t\r\n\r\nt\r\n", key, "example.org")
        except ValueError as exc:
            raise DkimKeyError(f"--dkim-key {path}: {exc}") from None
        found.append(key)
    return tuple(found)


def dkim_signer(keys: Sequence[str], selectors: Sequence[str]) -> DkimSigner | None:
    """The signer of ``--dkim-key`` and ``--dkim-selector`` (None: neither given)."""
    found = dkim_keys(keys, selectors)
    return DkimSigner(found) if found else None
