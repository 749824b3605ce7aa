"""A mail item's address, thread and sender checks, and the bounce item, as
the handler receives them from stored envelopes (the golden ones included)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from runtime.wire import BOUNCE_KIND, ROUTED_BY_HEADERS, BounceReport
from sidecar import AuthVerdict, Bounce, Mail, MailAuth
from sidecar.execution import item_of
from sidecar.storage import Envelope, decode_envelope
from tests.golden.samples import AT
from tests.golden.samples import DSP as SENT_BY

GOLDEN = Path(__file__).parents[2] / "golden" / "v2"
DSP = "dsp_" + "6" * 26


def golden(name: str) -> Envelope:
    return decode_envelope((GOLDEN / name).read_bytes())


def test_the_golden_mail_with_a_context_has_its_tag_thread_and_verdicts() -> None:
    mail = item_of(golden("inbox_envelope.context.msgpack"))
    assert isinstance(mail, Mail)
    assert (mail.to, mail.tag) == ("support+billing@example.org", "billing")
    assert mail.in_reply_to == f"<{DSP}.1@example.org>"
    assert mail.thread == ["<first@example.net>", f"<{DSP}.1@example.org>"]
    assert mail.routed_by == ROUTED_BY_HEADERS
    assert mail.auth == MailAuth(
        spf=AuthVerdict(result="pass", domain="example.net"),
        dkim=AuthVerdict(result="pass", domain="example.net"),
        dmarc=AuthVerdict(result="fail", domain="example.net", detail="reject"),
    )
    assert mail.auth.source == "hub"
    assert (mail.subject, mail.text, mail.sender) == ("Re: hello", "yes", "a@example.net")


@pytest.mark.parametrize("name", ["inbox_envelope.msgpack", "v1"])
def test_a_mail_stored_without_a_context_has_the_fields_empty(name: str) -> None:
    path = GOLDEN.parent / "v1" / "inbox_envelope.msgpack" if name == "v1" else GOLDEN / name
    mail = item_of(decode_envelope(path.read_bytes()))
    assert isinstance(mail, Mail)
    assert (mail.to, mail.tag, mail.in_reply_to, mail.thread, mail.routed_by, mail.auth) == (
        "",
        None,
        None,
        [],
        "",
        None,
    )


def test_the_golden_bounce_names_the_bounced_mail() -> None:
    bounce = item_of(golden("inbox_envelope.bounce.msgpack"))
    assert isinstance(bounce, Bounce)
    assert bounce.kind == BOUNCE_KIND == "bounce"
    # The bounced mail's Message-ID, not the dispatch's own message id.
    assert bounce.message_id == f"<{SENT_BY}.1@example.org>" == bounce.subject
    assert (bounce.recipient, bounce.status) == ("x@example.net", "5.1.1")
    assert bounce.diagnostic == "550 5.1.1 <x@example.net>: no such user"
    assert bounce.source == "relay"
    assert bounce.bounced_at == AT + 1.5


def bounce_envelope(body: bytes) -> Envelope:
    return Envelope(
        dispatch_id="dsp_1",
        deployment_id="dep_1",
        run_id="run_1",
        address="flow@mailrun.local",
        kind=BOUNCE_KIND,
        message_id="bounce:out_1",
        subject="<sent.1@mailrun.local>",
        body=body,
    )


def test_a_dsn_bounce_reads_every_field() -> None:
    report = BounceReport(
        message_id="<sent.1@mailrun.local>",
        recipient="gone@example.net",
        status="5.2.2",
        diagnostic="smtp; 552 mailbox full",
        source="dsn",
        bounced_at=1_700_000_000.5,
    )
    bounce = item_of(bounce_envelope(msgspec.json.encode(report)))
    assert isinstance(bounce, Bounce)
    got = (bounce.recipient, bounce.status, bounce.diagnostic, bounce.source, bounce.bounced_at)
    assert got == ("gone@example.net", "5.2.2", "smtp; 552 mailbox full", "dsn", 1_700_000_000.5)


@pytest.mark.parametrize(
    "body",
    [b"", b"\xff", b"[1]", b'{"message_id": 5, "status": ["5.1.1"], "bounced_at": "soon"}'],
)
def test_a_malformed_bounce_body_leaves_its_fields_empty_and_the_subject_names_the_mail(
    body: bytes,
) -> None:
    bounce = item_of(bounce_envelope(body))
    assert isinstance(bounce, Bounce)
    assert bounce.message_id == "<sent.1@mailrun.local>"
    fields = (bounce.recipient, bounce.status, bounce.diagnostic, bounce.source)
    assert (fields, bounce.bounced_at, bounce.body) == (("", "", "", ""), 0.0, body)
