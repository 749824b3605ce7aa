"""A DNS server for tests: dnslib on a free loopback UDP port, answering
from a zone the test fills (TXT and A records), for the SMTP sender checks
(SPF, DKIM and DMARC records of ``example.test`` domains).

``with dns_server() as dns:`` yields a :class:`LocalDns`; its ``address``
is what ``--dns-server`` takes. A name the zone does not have is NXDOMAIN.
The zone may change while it runs (each answer reads it under a lock).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from dnslib import QTYPE, RCODE, RR, TXT, A, DNSRecord
from dnslib.server import BaseResolver, DNSHandler, DNSLogger, DNSServer

from runtime.config import HostPort

_TXT_CHUNK = 255  # one character-string of a TXT record


class LocalDns(BaseResolver):
    """The zone, by lower-cased name without the final dot: ``[(type, rdata)]``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._zone: dict[str, list[tuple[str, object]]] = {}
        self.address = HostPort("127.0.0.1", 0)
        self.asked: list[tuple[str, str]] = []
        """Every question, as (name, type), in the order they came."""

    def txt(self, name: str, text: str) -> None:
        """A TXT record at ``name`` (split into strings of 255 characters)."""
        chunks = [text[i : i + _TXT_CHUNK] for i in range(0, len(text), _TXT_CHUNK)] or [""]
        self._add(name, "TXT", TXT(chunks))

    def a(self, name: str, address: str) -> None:
        self._add(name, "A", A(address))

    def _add(self, name: str, kind: str, rdata: object) -> None:
        with self._lock:
            self._zone.setdefault(name.lower().rstrip("."), []).append((kind, rdata))

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord:
        name = str(request.q.qname).lower().rstrip(".")
        kind = QTYPE[request.q.qtype]
        reply = request.reply()
        with self._lock:
            self.asked.append((name, kind))
            records = self._zone.get(name)
            for record_kind, rdata in records or []:
                if record_kind == kind:
                    reply.add_answer(RR(request.q.qname, request.q.qtype, rdata=rdata, ttl=60))
        if records is None:
            reply.header.rcode = RCODE.NXDOMAIN
        return reply


@contextmanager
def dns_server() -> Iterator[LocalDns]:
    """A running DNS server on 127.0.0.1 (a free UDP port), stopped after."""
    zone = LocalDns()
    quiet = DNSLogger(log="-request,-reply,-truncated,-error,-recv,-send,-data", logf=print)
    server = DNSServer(zone, address="127.0.0.1", port=0, logger=quiet)
    zone.address = HostPort("127.0.0.1", server.server.server_address[1])
    server.start_thread()
    try:
        yield zone
    finally:
        server.stop()
        server.server.server_close()
