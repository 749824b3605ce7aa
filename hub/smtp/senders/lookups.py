"""The DNS lookups of the sender checks: one resolver the hub builds (the
system's, or ``--dns-server HOST:PORT``), and one budget per mail, so a
dead or slow resolver never holds a client for long.

Every lookup of one mail's checks shares :data:`BUDGET` seconds: each is
given what is left, at most :data:`PER_LOOKUP`; once it is spent, every
further lookup fails at once as a timeout, which the checks report as
``none`` with the detail ``temperror``. The lookups block (dnspython's
sync resolver): the checks run them off the event loop.

pyspf looks names up through its module's ``DNSLookup`` function, the seam
its own DNS drivers (``SPF/pydns.py``, ``SPF/dnspython.py``) set; this
module sets it once, to :func:`_spf_lookup`, which asks the resolver and
budget of the check running in the calling thread (:func:`spf_lookups`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import dns.exception
import dns.name
import dns.rdatatype
import dns.resolver
import spf

from runtime.config import HostPort

BUDGET: Final = 4.0
"""Seconds every DNS lookup of one mail's checks may take together."""
PER_LOOKUP: Final = 2.5
"""Seconds one lookup may take (a resolver that does not answer: one try)."""


def _timed_out() -> dns.exception.Timeout:
    """What a lookup raises when the mail's budget is spent, or the resolver
    did not answer in time (dnspython's own timeout, which dkimpy and
    authheaders know)."""
    return dns.exception.Timeout()  # type: ignore[no-untyped-call]


def make_resolver(server: HostPort | None) -> dns.resolver.Resolver:
    """A resolver asking ``server`` (None: the system's, from resolv.conf),
    caching answers for their TTL."""
    if server is None:
        try:
            resolver = dns.resolver.Resolver()
        except dns.resolver.NoResolverConfiguration:
            # No resolv.conf: every lookup fails, and every check says temperror.
            resolver = dns.resolver.Resolver(configure=False)
    else:
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = [server.host]
        resolver.port = server.port
    resolver.cache = dns.resolver.LRUCache()
    resolver.timeout = PER_LOOKUP
    return resolver


class Lookups:
    """One mail's DNS lookups: a resolver and what is left of the budget."""

    def __init__(self, resolver: dns.resolver.Resolver, budget: float = BUDGET) -> None:
        self._resolver = resolver
        self._deadline = time.monotonic() + budget

    def answers(self, name: str, rdtype: str) -> list[Any]:
        """The records of type ``rdtype`` at ``name`` ([] for none or no such
        name); ``dns.exception.Timeout`` once the budget is spent."""
        left = min(PER_LOOKUP, self._deadline - time.monotonic())
        if left <= 0:
            raise _timed_out()
        try:
            answer = self._resolver.resolve(
                name, rdtype, lifetime=left, search=False, raise_on_no_answer=False
            )
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer, dns.name.EmptyLabel):
            return []
        except (dns.exception.Timeout, dns.resolver.NoNameservers):
            # Every server refused or failed: as unanswered as a timeout.
            raise _timed_out() from None
        return list(answer)

    def txt(self, name: str) -> str | None:
        """The first TXT record at ``name``, its strings joined; None: none."""
        for record in self.answers(name, "TXT"):
            return b"".join(record.strings).decode("utf-8", "replace")
        return None

    def dkim_txt(self, name: bytes, timeout: float = PER_LOOKUP) -> bytes | None:
        """dkimpy's ``dnsfunc``: a DKIM key record by its (bytes) name."""
        text = self.txt(name.decode("ascii", "replace"))
        return None if text is None else text.encode()


_current = threading.local()


@contextmanager
def spf_lookups(lookups: Lookups) -> Iterator[None]:
    """pyspf's lookups in this thread go through ``lookups`` meanwhile."""
    _current.lookups = lookups
    try:
        yield
    finally:
        _current.lookups = None


def _spf_lookup(name: str, qtype: str, strict: bool = True, timeout: float = 20) -> list[Any]:
    """pyspf's DNS driver: ``[((name, qtype), value), ...]`` as its own
    dnspython driver answers, through the calling thread's :class:`Lookups`."""
    lookups: Lookups | None = getattr(_current, "lookups", None)
    if lookups is None:
        raise spf.TempError("DNS: no lookups outside a sender check")
    try:
        records = lookups.answers(name, qtype)
    except dns.exception.DNSException as exc:
        raise spf.TempError(f"DNS {exc}") from None
    found: list[Any] = []
    for rdata in records:
        if qtype in ("A", "AAAA"):
            found.append(((name, qtype), rdata.address))
        elif qtype == "MX":
            found.append(((name, qtype), (rdata.preference, rdata.exchange)))
        elif qtype == "PTR":
            found.append(((name, qtype), rdata.target.to_text(True)))
        elif qtype in ("TXT", "SPF"):
            found.append(((name, qtype), rdata.strings))
    return found


spf.DNSLookup = _spf_lookup
