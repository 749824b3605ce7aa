"""The hub's sender checks against a real DNS server (tests/support/servers/dns.py)
with SPF, DKIM and DMARC records, on messages signed with dkimpy by a key
made here; and a trusted relay's Authentication-Results read."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from hub.smtp.senders import (
    BUDGET,
    Lookups,
    SenderChecks,
    make_resolver,
    relay_verdicts,
    verify_sender,
)
from runtime.config import HostPort
from runtime.wire import AuthVerdict, MailAuth
from tests.support.servers.dns import LocalDns, dns_server

from .senders_zone import fill, message, signed


@pytest.fixture(scope="module")
def zone() -> Iterator[LocalDns]:
    with dns_server() as server:
        yield fill(server)


def check(zone: LocalDns, raw: bytes, mail_from: str, ip: str = "127.0.0.1") -> MailAuth:
    lookups = Lookups(make_resolver(zone.address))
    return verify_sender(lookups, raw, ip=ip, helo="client.test", mail_from=mail_from)


def test_signed_mail_from_an_allowed_address_passes_all_three(zone: LocalDns) -> None:
    raw = signed(message("Alice <alice@example.test>"), "example.test")
    auth = check(zone, raw, "alice@example.test")
    assert auth == MailAuth(
        spf=AuthVerdict(result="pass", domain="example.test"),
        dkim=AuthVerdict(result="pass", domain="example.test"),
        dmarc=AuthVerdict(result="pass", domain="example.test"),
        source="hub",
    )


def test_unsigned_mail_from_a_wrong_address_fails_spf_and_dmarc(zone: LocalDns) -> None:
    auth = check(zone, message("bob@elsewhere.test"), "bob@elsewhere.test")
    assert auth.spf == AuthVerdict(result="fail", domain="elsewhere.test", detail="fail")
    assert auth.dkim == AuthVerdict(result="none", detail="no signature")
    assert auth.dmarc == AuthVerdict(result="fail", domain="elsewhere.test", detail="p=reject")


def test_a_from_header_signed_by_another_domain_fails_dmarc(zone: LocalDns) -> None:
    # SPF and DKIM pass, for other.test: neither aligns with the From header's domain.
    raw = signed(message("The Boss <boss@example.test>"), "other.test")
    auth = check(zone, raw, "mailer@other.test")
    assert auth.spf == AuthVerdict(result="pass", domain="other.test")
    assert auth.dkim == AuthVerdict(result="pass", domain="other.test")
    assert auth.dmarc.result == "fail"
    assert auth.dmarc.domain == "example.test"


def test_a_message_altered_after_signing_fails_dkim(zone: LocalDns) -> None:
    raw = signed(message("alice@example.test", "pay 10"), "example.test")
    altered = raw.replace(b"pay 10\r\n", b"pay 1000\r\n")
    assert altered != raw
    auth = check(zone, altered, "alice@example.test")
    assert auth.dkim.result == "fail"
    assert auth.dkim.domain == "example.test"
    # SPF still passes and aligns: DMARC needs only one of the two.
    assert auth.dmarc.result == "pass"


def test_a_domain_without_records_is_none_throughout(zone: LocalDns) -> None:
    auth = check(zone, message("carol@unknown.test"), "carol@unknown.test")
    assert (auth.spf.result, auth.dkim.result, auth.dmarc.result) == ("none", "none", "none")


@pytest.mark.slow
def test_a_resolver_that_never_answers_gives_temperror_within_the_budget() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))  # takes the questions, answers none
        dead = HostPort("127.0.0.1", silent.getsockname()[1])
        raw = signed(message("alice@example.test"), "example.test")
        started = time.monotonic()
        auth = verify_sender(
            Lookups(make_resolver(dead)),
            raw,
            ip="127.0.0.1",
            helo="c.test",
            mail_from="a@example.test",
        )
        took = time.monotonic() - started
    assert took < BUDGET + 1.0
    assert auth.spf == AuthVerdict(result="none", domain="example.test", detail="temperror")
    assert auth.dkim == AuthVerdict(result="none", domain="example.test", detail="temperror")
    assert auth.dmarc == AuthVerdict(result="none", domain="example.test", detail="temperror")


RELAYED = (
    b"Authentication-Results: evil.test; spf=pass smtp.mailfrom=x@example.test;"
    b" dkim=pass header.d=example.test; dmarc=pass header.from=example.test\r\n"
    b"Authentication-Results: mx.relay.test; spf=softfail smtp.mailfrom=x@elsewhere.test;"
    b" dkim=none; dmarc=fail (p=reject) header.from=elsewhere.test\r\n"
)


def test_a_relays_header_is_found_by_its_authserv_id() -> None:
    auth = relay_verdicts(RELAYED + message("x@elsewhere.test"), ["mx.relay.test"])
    assert auth == MailAuth(
        spf=AuthVerdict(result="fail", domain="elsewhere.test", detail="softfail"),
        dkim=AuthVerdict(result="none"),
        dmarc=AuthVerdict(result="fail", domain="elsewhere.test", detail="fail"),
        source="relay",
    )


def test_without_its_authserv_id_the_topmost_header_is_read() -> None:
    auth = relay_verdicts(RELAYED + message("x@example.test"), ["127.0.0.1"])
    assert auth.dmarc == AuthVerdict(result="pass", domain="example.test")
    assert auth.source == "relay"
    assert relay_verdicts(message("x@example.test"), ["127.0.0.1"]) == MailAuth(source="relay")


@pytest.mark.anyio
async def test_a_trusted_relay_is_known_by_its_names_addresses() -> None:
    checks = SenderChecks(None, ["localhost", "192.0.2.25"])
    await checks.start()
    assert checks.trusted("127.0.0.1")
    assert checks.trusted("::ffff:192.0.2.25")  # as a dual-stack socket shows it
    assert not checks.trusted("192.0.2.26")
    assert not checks.trusted("not an address")
    # Its mail is read, not checked: no DNS is asked (there is no server to ask).
    auth = await checks.verify(RELAYED + message("x@example.test"), peer_ip="192.0.2.25",
                               helo="mx.relay.test", mail_from="x@example.test")  # fmt: skip
    assert auth.source == "relay" and auth.dmarc.result == "pass"


@pytest.mark.parametrize(
    "header",
    [
        b"Authentication-Results: ;;;\r\n",
        b"Authentication-Results: mx; spf=\r\n",
        b"Authentication-Results: mx; dkim=pass header.d\r\n",
        b"Authentication-Results: \xff\xfe; dmarc=pass\r\n",
        b"Authentication-Results: mx; none\r\n",
    ],
)
def test_a_malformed_header_never_breaks_the_reading(header: bytes) -> None:
    auth = relay_verdicts(header + message("x@example.test"), ["mx"])
    assert auth.source == "relay"
    assert {auth.spf.result, auth.dkim.result, auth.dmarc.result} <= {"pass", "fail", "none"}
