"""The SMTP ingress in one process: a real store and acceptor, aiosmtpd on the
test's event loop, ``smtplib`` in a worker thread as the client."""

from __future__ import annotations

import dataclasses
import smtplib
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from email.message import EmailMessage
from email.policy import SMTP
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from hub import Acceptor, Store, bind_socket
from hub.smtp import PASSWORD_ENV, USER_ENV, SmtpConfig, SmtpServer, smtp_config
from hub.store import Accepted, Trigger, create_deployment, delete_deployment, open_store
from hub.store.sql import sql
from runtime.testing import configure_failpoints
from tests.support import wait_for
from tests.support.servers.smtp import self_signed
from tests.support.store import rows

# slow: every test runs the SMTP ingress over real sockets against a hub's store
pytestmark = [pytest.mark.anyio, pytest.mark.slow]
T = TypeVar("T")
LOGIN = ("robot", "s3cret")

COMPLETE_TOP_LEVEL = sql("UPDATE workflow_run SET status = 'completed' WHERE is_top_level = 1")


@pytest.fixture(params=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, bool]]:
    # The hub runs on uvloop: its transports are not asyncio's classes.
    return "asyncio", {"use_uvloop": request.param == "uvloop"}


@dataclasses.dataclass
class Ingress:
    store: Store
    acceptor: Acceptor
    server: SmtpServer
    ca_file: Path | None

    @property
    def port(self) -> int:
        return self.server.address.port

    async def client(self, work: Callable[[smtplib.SMTP], T]) -> T:
        """``work`` on a connected smtplib client, in a worker thread."""

        def run() -> T:
            with smtplib.SMTP("127.0.0.1", self.port, timeout=10) as smtp:
                return work(smtp)

        return await anyio.to_thread.run_sync(run)

    async def send(self, message: EmailMessage, *to: str, **kw: Any) -> Any:
        return await self.client(lambda s: s.send_message(message, to_addrs=list(to), **kw))

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    async def dispatches(self) -> list[tuple[Any, ...]]:
        return await rows(
            self.store,
            "SELECT d.address, x.seq, x.message_id, x.sender, x.subject, x.body"
            " FROM workflow_run_dispatch x JOIN deployment d ON d.id = x.deployment_id"
            " ORDER BY x.created_at, x.seq",
        )


@asynccontextmanager
async def ingress(
    tmp_path: Path, *, max_body: int = 1 << 20, login: bool = False, **config: Any
) -> AsyncIterator[Ingress]:
    ca_file = None
    base = smtp_config("127.0.0.1:0", {}, allow_port_zero=True)
    if login:
        _, ca_file = self_signed(tmp_path)
        env = {USER_ENV: LOGIN[0], PASSWORD_ENV: LOGIN[1]}
        base = smtp_config(
            "127.0.0.1:0",
            env,
            cert_file=ca_file,
            key_file=tmp_path / "relay.key",
            allow_port_zero=True,
        )
    smtp: SmtpConfig = dataclasses.replace(base, hostname="mailrun.test", **config)
    async with await open_store(tmp_path / "hub.db") as store:
        for name in ("orders", "audit"):
            await create_deployment(
                store, name=name, source="async def main(ctx, item): pass\n",
                domain="mailrun.local", nats_url="nats://127.0.0.1:4222", subject_prefix="mailrun",
            )  # fmt: skip
        acceptor = Acceptor(store)
        sock = bind_socket(smtp.host, smtp.port)
        server = SmtpServer(smtp, sock, store=store, acceptor=acceptor, max_body=max_body)
        async with anyio.create_task_group() as tg:
            await tg.start(acceptor.run)
            await tg.start(server.run)
            yield Ingress(store, acceptor, server, ca_file)
            tg.cancel_scope.cancel()


def mail(subject: str, body: str = "hello", message_id: str | None = None) -> EmailMessage:
    message = EmailMessage()
    message["From"] = "Alice <alice@example.com>"
    message["To"] = "orders@mailrun.local"
    message["Subject"] = subject
    if message_id is not None:
        message["Message-ID"] = message_id
    message.set_content(body)
    return message


async def test_a_mail_becomes_a_trigger_with_from_subject_and_text(tmp_path: Path) -> None:
    async with ingress(tmp_path) as hub:
        raw = mail("one").as_bytes(policy=SMTP)  # CRLF line ends, as SMTP wants them
        answer = await hub.client(
            lambda s: s.sendmail("env@example.com", ["Orders@mailrun.local"], raw)
        )
        assert answer == {}
        (row,) = await hub.dispatches()
        assert row == ("orders@mailrun.local", 1, None, "alice@example.com", "one", b"hello\n")


async def test_unknown_and_deleted_addresses_are_refused_at_rcpt(tmp_path: Path) -> None:
    async with ingress(tmp_path) as hub:
        (dep,) = await rows(hub.store, "SELECT id FROM deployment WHERE name = 'audit'")
        await delete_deployment(hub.store, dep[0])

        def rcpts(smtp: smtplib.SMTP) -> list[tuple[int, bytes]]:
            smtp.ehlo()
            smtp.mail("alice@example.com")
            return [smtp.rcpt(a) for a in ("nobody@mailrun.local", "audit@mailrun.local")]

        unknown, deleted = await hub.client(rcpts)
        assert unknown[0] == 550 and unknown[1].startswith(b"5.1.1")
        assert deleted[0] == 550 and b"deleted" in deleted[1]
        with pytest.raises(smtplib.SMTPRecipientsRefused):
            await hub.send(mail("lost"), "nobody@mailrun.local")
        # One good recipient of two: the message goes to it alone.
        refused = await hub.send(mail("half"), "orders@mailrun.local", "nobody@mailrun.local")
        assert list(refused) == ["nobody@mailrun.local"]
        assert [r[4] for r in await hub.dispatches()] == ["half"]


async def test_a_run_that_ended_refuses_at_rcpt(tmp_path: Path) -> None:
    async with ingress(tmp_path) as hub:
        await hub.send(mail("first"), "orders@mailrun.local")
        await hub.store.transact(lambda tx: tx.execute(COMPLETE_TOP_LEVEL))
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
            await hub.send(mail("late"), "orders@mailrun.local")
        assert refused.value.recipients["orders@mailrun.local"][0] == 550


async def test_each_recipient_is_a_trigger_accepted_in_one_transaction(tmp_path: Path) -> None:
    async with ingress(tmp_path) as hub:
        batches = hub.acceptor.counts["batches"]
        both = ["orders@mailrun.local", "audit@mailrun.local", "ORDERS@mailrun.local"]
        await hub.send(mail("both", message_id="<both@example.com>"), *both)
        rows = await hub.dispatches()
        assert sorted(r[0] for r in rows) == ["audit@mailrun.local", "orders@mailrun.local"]
        assert {r[2] for r in rows} == {"<both@example.com>"}  # unique per deployment
        assert hub.acceptor.counts["batches"] == batches + 1


async def test_the_same_message_id_counts_once_and_none_means_every_send(tmp_path: Path) -> None:
    async with ingress(tmp_path) as hub:
        once = mail("once", message_id="<once@example.com>")

        def twice(smtp: smtplib.SMTP) -> list[tuple[int, bytes]]:
            answers = []
            for _ in range(2):
                smtp.ehlo_or_helo_if_needed()
                smtp.mail("alice@example.com")
                smtp.rcpt("orders@mailrun.local")
                answers.append(smtp.data(once.as_bytes(policy=SMTP)))
            return answers

        first, second = await hub.client(twice)
        assert first[0] == second[0] == 250
        assert second[1].startswith(b"2.0.0 Already accepted as dsp_")
        assert first[1].split()[-1] == second[1].split()[-1]  # the same dispatch
        for _ in range(2):
            await hub.send(mail("no id"), "orders@mailrun.local")
        assert [r[4] for r in await hub.dispatches()] == ["once", "no id", "no id"]


async def test_a_reused_message_id_with_other_content_is_refused(tmp_path: Path) -> None:
    async with ingress(tmp_path) as hub:
        await hub.send(mail("a", message_id="<x@example.com>"), "orders@mailrun.local")
        with pytest.raises(smtplib.SMTPDataError) as refused:
            await hub.send(mail("b", message_id="<x@example.com>"), "orders@mailrun.local")
        assert refused.value.smtp_code == 554
        assert b"message_id_reused" in refused.value.smtp_error


async def test_a_message_id_the_hub_reserves_is_refused(tmp_path: Path) -> None:
    async with ingress(tmp_path) as hub:
        with pytest.raises(smtplib.SMTPDataError) as refused:
            await hub.send(mail("sneaky", message_id="start:run_x"), "orders@mailrun.local")
        assert refused.value.smtp_code == 554 and b"invalid_mail" in refused.value.smtp_error
        assert await hub.dispatches() == []


async def test_oversized_messages_get_552(tmp_path: Path) -> None:
    async with ingress(tmp_path, max_body=1000, max_message=20_000) as hub:
        with pytest.raises(smtplib.SMTPDataError) as text_too_big:
            await hub.send(mail("big text", "x" * 2000), "orders@mailrun.local")
        assert text_too_big.value.smtp_code == 552
        with pytest.raises((smtplib.SMTPSenderRefused, smtplib.SMTPDataError)) as too_big:
            await hub.send(mail("huge", "y\n" * 20_000), "orders@mailrun.local")
        assert too_big.value.smtp_code == 552  # by the SIZE it declared, or as it came
        await hub.send(mail("fits", "z" * 900), "orders@mailrun.local")
        assert [r[4] for r in await hub.dispatches()] == ["fits"]


async def test_too_many_recipients_get_452(tmp_path: Path) -> None:
    async with ingress(tmp_path, max_recipients=1) as hub:
        refused = await hub.send(mail("one"), "orders@mailrun.local", "audit@mailrun.local")
        assert refused["audit@mailrun.local"][0] == 452
        assert [r[0] for r in await hub.dispatches()] == ["orders@mailrun.local"]


async def test_a_failed_commit_answers_451_and_the_retry_is_accepted_once(tmp_path: Path) -> None:
    async with ingress(tmp_path) as hub:
        message = mail("retried", message_id="<r@example.com>")
        configure_failpoints("hub.accept.before_commit=1*raise")
        try:
            with pytest.raises(smtplib.SMTPDataError) as failed:
                await hub.send(message, "orders@mailrun.local")
        finally:
            configure_failpoints("")
        assert failed.value.smtp_code == 451  # 4xx: the client keeps it and retries
        assert await hub.dispatches() == []
        await hub.send(message, "orders@mailrun.local")
        await hub.send(message, "orders@mailrun.local")
        assert [r[4] for r in await hub.dispatches()] == ["retried"]


async def test_starttls_and_auth_only_over_tls(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with ingress(tmp_path, login=True) as hub:

        def plain(smtp: smtplib.SMTP) -> tuple[bool, tuple[int, bytes], tuple[int, bytes]]:
            smtp.ehlo()
            offered = smtp.has_extn("auth")
            return offered, smtp.docmd("AUTH", "PLAIN AHJvYm90AHMzY3JldA=="), smtp.mail("a@b.c")

        offered, auth, mail_from = await hub.client(plain)
        assert not offered
        assert auth[0] == 538  # encryption required for AUTH
        assert mail_from[0] == 530  # no mail before a login

        def wrong(smtp: smtplib.SMTP) -> None:
            smtp.starttls(context=hub.tls())
            smtp.login(LOGIN[0], "wrong")

        with pytest.raises(smtplib.SMTPAuthenticationError):
            await hub.client(wrong)

        def good(smtp: smtplib.SMTP) -> dict[str, Any]:
            smtp.starttls(context=hub.tls())
            smtp.ehlo()
            assert smtp.has_extn("auth") and not smtp.has_extn("starttls")
            smtp.login(*LOGIN)
            return smtp.send_message(mail("secure"), to_addrs=["orders@mailrun.local"])

        assert await hub.client(good) == {}
        assert [r[4] for r in await hub.dispatches()] == ["secure"]
        # aiosmtpd sets its deprecated login_data after each login, warning each
        # time; that line says nothing about the hub and is kept out of its log.
        assert [r for r in caplog.records if "login_data" in r.getMessage()] == []


async def test_without_login_no_auth_is_offered_even_over_tls(tmp_path: Path) -> None:
    _, cert = self_signed(tmp_path)
    tls = {"cert_file": cert, "key_file": tmp_path / "relay.key"}
    async with ingress(tmp_path, **tls) as hub:
        hub.ca_file = cert

        def over_tls(smtp: smtplib.SMTP) -> tuple[bool, int]:
            smtp.starttls(context=hub.tls())
            smtp.ehlo()
            return smtp.has_extn("auth"), smtp.docmd("AUTH", "PLAIN AHJvYm90AHMzY3JldA==")[0]

        offered, code = await hub.client(over_tls)
        assert not offered and code == 504


async def test_shutdown_answers_421_to_idle_sessions_and_takes_no_more(tmp_path: Path) -> None:
    async with ingress(tmp_path) as hub:
        connected = anyio.Event()
        closed = anyio.Event()
        outcome: list[object] = []

        def idle() -> None:
            with smtplib.SMTP("127.0.0.1", hub.port, timeout=10) as smtp:
                smtp.ehlo()
                anyio.from_thread.run_sync(connected.set)
                anyio.from_thread.run(closed.wait)
                try:
                    outcome.append(smtp.mail("a@b.c")[0])
                except smtplib.SMTPServerDisconnected as exc:
                    outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, idle)
            await connected.wait()
            await hub.server.shutdown()
            closed.set()
        # The 421 the server said as it closed, or the closed connection itself.
        assert outcome[0] == 421 or isinstance(outcome[0], smtplib.SMTPServerDisconnected)
        with pytest.raises(OSError):
            await hub.client(lambda s: s.noop())


async def test_shutdown_lets_a_message_being_accepted_get_its_answer(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with ingress(tmp_path) as hub:
        configure_failpoints(f"hub.accept.after_commit=1*pause({gate})")
        answers: list[Any] = []
        try:
            async with anyio.create_task_group() as tg:

                def send() -> None:
                    # No QUIT after it: the server is gone by then (421).
                    smtp = smtplib.SMTP("127.0.0.1", hub.port, timeout=10)
                    try:
                        answers.append(
                            smtp.send_message(mail("last"), to_addrs=["orders@mailrun.local"])
                        )
                    finally:
                        smtp.close()

                tg.start_soon(anyio.to_thread.run_sync, send)
                # Committed, its answer held at the failpoint: the message is being decided.
                await wait_for(lambda: Path(f"{gate}.reached").exists(), what="the commit")
                stopped = anyio.Event()

                async def stop() -> None:
                    await hub.server.shutdown()
                    stopped.set()

                tg.start_soon(stop)
                await wait_for(lambda: hub.server.handler.stopping, what="the shutdown")
                assert not stopped.is_set()  # it waits for the answer
                gate.touch()
                with anyio.fail_after(10):
                    await stopped.wait()
        finally:
            configure_failpoints("")
        assert answers == [{}]  # 250: nothing refused
        assert [r[4] for r in await hub.dispatches()] == ["last"]
        with pytest.raises(OSError):
            await hub.client(lambda s: s.noop())


async def test_past_max_connections_a_client_gets_421(tmp_path: Path) -> None:
    async with ingress(tmp_path, max_connections=1) as hub:
        connected = anyio.Event()
        release = anyio.Event()

        def hold() -> None:
            with smtplib.SMTP("127.0.0.1", hub.port, timeout=10) as smtp:
                smtp.ehlo()
                anyio.from_thread.run_sync(connected.set)
                anyio.from_thread.run(release.wait)

        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, hold)
            await connected.wait()
            with pytest.raises(smtplib.SMTPConnectError) as busy:
                await hub.client(lambda s: s.noop())
            assert busy.value.smtp_code == 421
            release.set()

        async def admitted_again() -> bool:
            try:
                return (await hub.client(lambda s: s.noop()))[0] == 250
            except smtplib.SMTPConnectError:
                return False  # the held session not released yet

        await wait_for(admitted_again, what="the freed session's place")


async def test_accepted_receipts_are_what_the_acceptor_holds(tmp_path: Path) -> None:
    # The SMTP path and POST /mail meet in one place: the same message id
    # through the acceptor directly is a retry of the SMTP one.
    async with ingress(tmp_path) as hub:
        await hub.send(mail("shared", message_id="<s@example.com>"), "orders@mailrun.local")
        receipt = await hub.acceptor.accept(
            Trigger(
                address="orders@mailrun.local",
                message_id="<s@example.com>",
                sender="alice@example.com",
                subject="shared",
                body=b"hello\n",
            )
        )
        assert isinstance(receipt, Accepted) and receipt.duplicate
