"""Who may write to a deployment over SMTP: the hub's SMTP server, smtplib
as the client, a local DNS server with the senders' SPF, DKIM and DMARC
records. Allow and deny lists refuse at RCPT (the envelope sender) and at
DATA (the From header), require_dmarc refuses at DATA, a trusted relay's
Authentication-Results count and anyone else's do not; whatever is
refused leaves nothing stored."""

from __future__ import annotations

import dataclasses
import smtplib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from hub import Acceptor, Store, bind_socket
from hub.smtp import SmtpServer, smtp_config
from hub.store import create_deployment, open_store
from hub.store.mail import MailChange, set_mail_settings
from tests.support.servers.dns import LocalDns, dns_server
from tests.support.store import rows

from .senders_zone import fill, message, signed

# slow: every test runs the SMTP ingress over real sockets against a hub's store
pytestmark = [pytest.mark.anyio, pytest.mark.slow]
T = TypeVar("T")


@pytest.fixture(scope="module")
def zone() -> Iterator[LocalDns]:
    with dns_server() as server:
        yield fill(server)


@dataclasses.dataclass
class Hub:
    store: Store
    server: SmtpServer

    async def client(self, work: Callable[[smtplib.SMTP], T]) -> T:
        def run() -> T:
            with smtplib.SMTP("127.0.0.1", self.server.address.port, timeout=10) as smtp:
                smtp.ehlo("client.test")
                return work(smtp)

        return await anyio.to_thread.run_sync(run)

    async def sendmail(self, mail_from: str, raw: bytes, *to: str) -> tuple[int, bytes]:
        """The answer to DATA (or to the first refused command)."""

        def send(smtp: smtplib.SMTP) -> tuple[int, bytes]:
            try:
                smtp.sendmail(mail_from, list(to or ["orders@mailrun.local"]), raw)
            except smtplib.SMTPRecipientsRefused as exc:
                return next(iter(exc.recipients.values()))
            except smtplib.SMTPDataError as exc:
                return exc.smtp_code, exc.smtp_error
            return 250, b""

        return await self.client(send)

    async def settings(self, name: str, **change: Any) -> None:
        (dep,) = await rows(self.store, "SELECT id FROM deployment WHERE name = ?", name)
        body = partial(set_mail_settings, deployment_id=dep[0], change=MailChange(**change))
        await self.store.transact(body)

    async def stored(self) -> dict[str, int]:
        """What the store holds of mail: dispatches, runs that are not
        anchors, blobs that are not a version's sources (a raw message)."""
        counts = {}
        for table, where in (
            ("workflow_run_dispatch", ""),
            ("workflow_run", " WHERE is_anchor = 0"),
            ("blob", " WHERE digest NOT IN (SELECT digest FROM deployment_version)"),
        ):
            ((count,),) = await rows(self.store, f"SELECT COUNT(*) FROM {table}{where}")
            counts[table] = count
        return counts


NOTHING = {"workflow_run_dispatch": 0, "workflow_run": 0, "blob": 0}


@asynccontextmanager
async def hub(tmp_path: Path, zone: LocalDns, **config: Any) -> AsyncIterator[Hub]:
    base = smtp_config(
        "127.0.0.1:0", {}, allow_port_zero=True, dns_server=str(zone.address), **config
    )
    smtp = dataclasses.replace(base, hostname="mailrun.test")
    async with await open_store(tmp_path / "hub.db") as store:
        for name in ("orders", "audit"):
            await create_deployment(
                store, name=name, source="async def main(ctx, item): pass\n",
                domain="mailrun.local", nats_url="nats://127.0.0.1:4222", subject_prefix="mailrun",
            )  # fmt: skip
        acceptor = Acceptor(store)
        sock = bind_socket(smtp.host, smtp.port)
        server = SmtpServer(smtp, sock, store=store, acceptor=acceptor, max_body=1 << 20)
        async with anyio.create_task_group() as tg:
            await tg.start(acceptor.run)
            await tg.start(server.run)
            yield Hub(store, server)
            tg.cancel_scope.cancel()


async def test_deny_from_refuses_the_envelope_sender_at_rcpt(
    tmp_path: Path, zone: LocalDns
) -> None:
    async with hub(tmp_path, zone) as h:
        await h.settings("orders", deny_from=["*@elsewhere.test"])
        raw = message("bob@elsewhere.test")
        code, text = await h.sendmail("bob+news@elsewhere.test", raw)
        assert code == 550
        assert text.startswith(b"5.7.1 ")
        assert await h.stored() == NOTHING
        # Another deployment takes the same sender.
        assert (await h.sendmail("bob@elsewhere.test", raw, "audit@mailrun.local"))[0] == 250
        dispatches = await rows(h.store, "SELECT sender FROM workflow_run_dispatch")
        assert [tuple(r) for r in dispatches] == [("bob@elsewhere.test",)]


async def test_allow_from_refuses_others_at_rcpt_and_a_from_header_at_data(
    tmp_path: Path, zone: LocalDns
) -> None:
    async with hub(tmp_path, zone) as h:
        await h.settings("orders", allow_from=["*@example.test"])
        code, _ = await h.sendmail("bob@elsewhere.test", message("bob@elsewhere.test"))
        assert code == 550
        # The envelope passes, the From header does not: refused at DATA, whole.
        raw = message("bob@elsewhere.test", "header")
        code, text = await h.sendmail("alice@example.test", raw, "orders@mailrun.local")
        assert (code, text[:6]) == (550, b"5.7.1 ")
        assert b"sender_not_allowed" in text
        assert await h.stored() == NOTHING
        # A null envelope sender (a bounce) under an allow list: no one to allow.
        assert (await h.sendmail("<>", message("alice@example.test", "null")))[0] == 550
        assert (await h.sendmail("alice@example.test", message("alice@example.test")))[0] == 250
        assert (await h.stored())["workflow_run_dispatch"] == 1


async def test_require_dmarc_takes_signed_mail_and_refuses_unsigned_and_forged(
    tmp_path: Path, zone: LocalDns
) -> None:
    async with hub(tmp_path, zone) as h:
        await h.settings("orders", require_dmarc=True)
        unsigned = message("bob@elsewhere.test", "unsigned")
        code, text = await h.sendmail("bob@elsewhere.test", unsigned)
        assert (code, text) == (
            550,
            b"5.7.1 DMARC did not pass (p=reject) for <orders@mailrun.local>",
        )
        forged = signed(message("boss@example.test", "forged"), "other.test")
        assert (await h.sendmail("mailer@other.test", forged))[0] == 550
        assert await h.stored() == NOTHING
        # One recipient requiring DMARC refuses the whole message.
        code, _ = await h.sendmail(
            "bob@elsewhere.test", unsigned, "audit@mailrun.local", "orders@mailrun.local"
        )
        assert code == 550
        assert await h.stored() == NOTHING
        good = signed(message("alice@example.test", "signed"), "example.test")
        assert (await h.sendmail("alice@example.test", good))[0] == 250
        # Without require_dmarc the unsigned mail is taken (its verdicts go with it).
        assert (await h.sendmail("bob@elsewhere.test", unsigned, "audit@mailrun.local"))[0] == 250
        subjects = await rows(h.store, "SELECT subject FROM workflow_run_dispatch ORDER BY seq")
        assert sorted(r[0] for r in subjects) == ["signed", "unsigned"]


RELAY_SAYS_PASS = (
    b"Authentication-Results: mx.relay.test; spf=pass smtp.mailfrom=bob@elsewhere.test;"
    b" dkim=none; dmarc=pass header.from=elsewhere.test\r\n"
)


async def test_a_trusted_relays_authentication_results_are_taken(
    tmp_path: Path, zone: LocalDns
) -> None:
    async with hub(tmp_path, zone, trusted_relays=("127.0.0.1",)) as h:
        await h.settings("orders", require_dmarc=True)
        # The hub's own checks would fail it (wrong IP, unsigned): the relay's word counts.
        raw = RELAY_SAYS_PASS + message("bob@elsewhere.test", "relayed")
        assert (await h.sendmail("bob@elsewhere.test", raw))[0] == 250
        # The relay says nothing: no DMARC pass.
        assert (await h.sendmail("bob@elsewhere.test", message("bob@elsewhere.test")))[0] == 550
        assert (await h.stored())["workflow_run_dispatch"] == 1


async def test_the_same_header_from_an_untrusted_peer_is_ignored(
    tmp_path: Path, zone: LocalDns
) -> None:
    async with hub(tmp_path, zone, trusted_relays=("192.0.2.25",)) as h:
        await h.settings("orders", require_dmarc=True)
        raw = RELAY_SAYS_PASS + message("bob@elsewhere.test", "forged results")
        code, text = await h.sendmail("bob@elsewhere.test", raw)
        assert (code, text) == (
            550,
            b"5.7.1 DMARC did not pass (p=reject) for <orders@mailrun.local>",
        )
        assert await h.stored() == NOTHING
