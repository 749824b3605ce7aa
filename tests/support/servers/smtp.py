"""A real SMTP server for the relay's tests: aiosmtpd on a loopback port,
recording every message it accepts. It can refuse recipients, ask for a
login, offer STARTTLS, not offer SMTPUTF8, and be stopped and started again on the
same port. And the delivery status notification a relay writes when a mail bounces."""

from __future__ import annotations

import datetime
import email
import email.policy
import ipaddress
import ssl
import threading
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ..launch.ports import free_port

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Received:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes

    @property
    def message(self) -> EmailMessage:
        parsed = email.message_from_bytes(self.data, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed

    @property
    def message_id(self) -> str:
        return str(self.message["Message-ID"])


@dataclass
class Recorder:
    """The aiosmtpd handler: answers per recipient, records what DATA brings."""

    received: list[Received] = field(default_factory=list)
    answers: dict[str, list[str]] = field(default_factory=dict)
    """recipient -> answers to its RCPT, used up one per attempt ("451 ...", ...)."""
    refused: list[str] = field(default_factory=list)
    """Every RCPT answered with a refusal, in order."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        with self.lock:
            queue = self.answers.get(address)
            answer = queue.pop(0) if queue else None
            if answer is not None:
                self.refused.append(answer)
                return answer
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            self.received.append(
                Received(envelope.mail_from, list(envelope.rcpt_tos), bytes(envelope.content))
            )
            return f"250 2.0.0 queued as q{len(self.received)}"

    def copies(self, message_id: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.message_id == message_id]


@dataclass
class SmtpServer:
    """One aiosmtpd server on a fixed loopback port (``start`` / ``stop``)."""

    port: int = field(default_factory=free_port)
    recorder: Recorder = field(default_factory=Recorder)
    login: tuple[str, str] | None = None
    tls: ssl.SSLContext | None = None
    smtputf8: bool = True
    """Offer SMTPUTF8 (addresses that are not ASCII), as aiosmtpd's Controller does."""
    _controller: Controller | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> None:
        kwargs: dict[str, Any] = {}
        if self.login is not None:
            kwargs.update(authenticator=self._authenticate, auth_require_tls=self.tls is not None)
        if self.tls is not None:
            kwargs.update(tls_context=self.tls, require_starttls=True)
        kwargs.update(enable_SMTPUTF8=self.smtputf8)
        self._controller = Controller(
            self.recorder, hostname=HOST, port=self.port, ready_timeout=10, **kwargs
        )
        self._controller.start()

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        ok = (
            isinstance(auth_data, LoginPassword)
            and self.login is not None
            and (auth_data.login.decode(), auth_data.password.decode()) == self.login
        )
        return AuthResult(success=ok, handled=False)


def self_signed(directory: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context for 127.0.0.1 and the CA file a client trusts it by."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mailrun test relay")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "relay.pem", directory / "relay.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context, cert_file


def delivery_report(
    to: str,
    original_id: str,
    recipient: str,
    *,
    action: str = "failed",
    status: str = "5.1.1",
) -> bytes:
    """A delivery status notification (RFC 3464) to ``to`` as a relay writes
    one: the mail ``original_id`` was ``action`` for ``recipient``."""
    text = f"""From: MAILER-DAEMON@relay.example.org
To: {to}
Subject: Undelivered Mail Returned to Sender
Message-ID: {make_msgid(domain="relay.example.org")}
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="=b="

--=b=
Content-Type: text/plain

Your message could not be delivered.
--=b=
Content-Type: message/delivery-status

Reporting-MTA: dns; relay.example.org

Final-Recipient: rfc822; {recipient}
Action: {action}
Status: {status}
Diagnostic-Code: smtp; 550 {status} <{recipient}>: mailbox unknown
--=b=
Content-Type: text/rfc822-headers

Message-ID: {original_id}
Subject: hello
--=b=--
"""
    return text.replace("\n", "\r\n").encode()
