"""The DNS zone and the mail of the sender-check tests: ``example.test``
(SPF takes 127.0.0.1, a DKIM key, DMARC p=reject), ``other.test`` (the same,
its own key: a real domain that signs and sends its own mail) and
``elsewhere.test`` (SPF takes only 192.0.2.1, DMARC p=reject, no key)."""

from __future__ import annotations

import base64
import functools
from email.message import EmailMessage
from email.policy import SMTP

import dkim
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.servers.dns import LocalDns

SELECTOR = "s1"


@functools.cache
def private_key(domain: str) -> bytes:
    """An RSA key of ``domain``, made once per test session (PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _public_record(domain: str) -> str:
    key = serialization.load_pem_private_key(private_key(domain), password=None)
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"v=DKIM1; k=rsa; p={base64.b64encode(der).decode()}"


def fill(zone: LocalDns) -> LocalDns:
    for domain in ("example.test", "other.test"):
        zone.txt(domain, "v=spf1 ip4:127.0.0.1 -all")
        zone.txt(f"{SELECTOR}._domainkey.{domain}", _public_record(domain))
        zone.txt(f"_dmarc.{domain}", "v=DMARC1; p=reject")
    zone.txt("elsewhere.test", "v=spf1 ip4:192.0.2.1 -all")
    zone.txt("_dmarc.elsewhere.test", "v=DMARC1; p=reject")
    return zone


def message(sender: str, subject: str = "hello", *, to: str = "orders@mailrun.local") -> bytes:
    """An unsigned message from ``sender``, CRLF line ends, as SMTP sends it."""
    mail = EmailMessage()
    mail["From"] = sender
    mail["To"] = to
    mail["Subject"] = subject
    mail["Message-ID"] = f"<{subject.replace(' ', '-')}@{sender.rpartition('@')[2]}>"
    mail.set_content(f"{subject}\n")
    return mail.as_bytes(policy=SMTP)


def signed(raw: bytes, domain: str) -> bytes:
    """``raw`` with a DKIM signature of ``domain`` on top."""
    signature = dkim.sign(
        raw,
        SELECTOR.encode(),
        domain.encode(),
        private_key(domain),
        include_headers=[b"from", b"to", b"subject", b"message-id"],
    )
    return bytes(signature) + raw
