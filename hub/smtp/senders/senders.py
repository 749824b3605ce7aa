"""SenderChecks: the verdicts of one SMTP message, by whoever may give
them. A peer that is a trusted relay is taken at its word (its
``Authentication-Results``); any other is checked by the hub, off the
event loop, within the per-mail DNS budget. A check that breaks on a
message no library expected gives every verdict ``none`` (detail
``error``), never a refusal of its own."""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable

import anyio

from runtime.config import HostPort
from runtime.wire import AuthVerdict, MailAuth

from .checks import verify_sender
from .lookups import Lookups, make_resolver
from .relay import relay_verdicts

log = logging.getLogger("mailrun.hub.smtp")


def _plain(address: str) -> str:
    """An address as its peers are compared: an IPv4 address a dual-stack
    socket shows as ``::ffff:a.b.c.d`` is ``a.b.c.d``."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def _addresses(host: str) -> set[str]:
    """The addresses ``host`` (an address or a name) stands for."""
    try:
        return {_plain(str(ipaddress.ip_address(host)))}
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        log.warning("--smtp-trusted-relay %s does not resolve: %s", host, exc)
        return set()
    return {_plain(str(info[4][0])) for info in infos}


class SenderChecks:
    """The sender checks of one SMTP server: its resolver, its trusted relays."""

    def __init__(self, dns_server: HostPort | None, trusted_relays: Iterable[str] = ()) -> None:
        self._resolver = make_resolver(dns_server)
        self._relays = tuple(trusted_relays)
        self._relay_ips: set[str] = set()

    async def start(self) -> None:
        """Resolve the trusted relays' names, once, off the event loop."""
        for host in self._relays:
            self._relay_ips |= await anyio.to_thread.run_sync(_addresses, host)

    def trusted(self, peer_ip: str) -> bool:
        """Whether ``peer_ip`` is one of the trusted relays."""
        return _plain(peer_ip) in self._relay_ips

    async def verify(self, raw: bytes, *, peer_ip: str, helo: str, mail_from: str) -> MailAuth:
        """The message's verdicts: its relay's, or the hub's own."""
        peer_ip = _plain(peer_ip)
        if peer_ip in self._relay_ips:
            return relay_verdicts(raw, self._relays)
        lookups = Lookups(self._resolver)
        try:
            return await anyio.to_thread.run_sync(
                lambda: verify_sender(lookups, raw, ip=peer_ip, helo=helo, mail_from=mail_from)
            )
        except Exception:
            log.exception("sender checks of a message from %s failed", peer_ip)
            broken = AuthVerdict(detail="error")
            return MailAuth(spf=broken, dkim=broken, dmarc=broken)
