"""The message an outbound row becomes, for each shape (text, html,
attachments, Cc, non-ASCII), read back with the standard library's ``email``
package; the same bytes on every attempt; what can never be a message is
refused with its reason."""

from __future__ import annotations

import dataclasses
import email
import email.policy
from email.message import EmailMessage

import pytest

from hub.outbound import build_message
from hub.store import DueMail, OutboundMail, OutboundSpec
from hub.store.outbound.outbox import unsendable
from hub.store.outbound.spec import encode_spec
from runtime import new_id
from runtime.wire import Attachment

SENDER = "flow@mailrun.local"
TO = "someone@example.org"
REPLY = "flow+r-0123@mailrun.local"
CREATED = 1_700_000_000.0
PDF = Attachment(filename="report.pdf", content_type="application/pdf", data=b"%PDF-1.7\x00\xff")
NOTE = Attachment(filename="notes ü.txt", content_type="text/plain", data="grüße\n".encode())


def due(spec: OutboundSpec | None = None, **changes: object) -> DueMail:
    fields: dict[str, object] = dict(
        id=new_id("out"), message_id="<dsp_1.1@mailrun.local>", sender=SENDER, recipient=TO,
        subject="hello", body=b"the text\n", created_at=CREATED, attempts=0, in_doubt=False,
        spec=None if spec is None else encode_spec(spec),
    )  # fmt: skip
    fields.update(changes)
    return DueMail(**fields)  # type: ignore[arg-type]


def parsed(data: bytes) -> EmailMessage:
    """As a mail store keeps it: line ends its own."""
    message = email.message_from_bytes(data.replace(b"\r\n", b"\n"), policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    assert not message.defects
    return message


def test_text_only_is_text_plain_with_the_hubs_headers() -> None:
    mail = due()
    built = build_message(mail, REPLY)
    message = parsed(built.data)
    assert message.get_content_type() == "text/plain"
    assert message.get_content() == "the text\n"
    assert (message["From"], message["To"], message["Subject"]) == (SENDER, TO, "hello")
    assert message["Message-ID"] == "<dsp_1.1@mailrun.local>"
    assert message["Reply-To"] == REPLY
    assert message["Date"].datetime.timestamp() == CREATED
    assert message["Cc"] is None and message["In-Reply-To"] is None
    assert built.recipients == (TO,) and not built.smtputf8
    assert built.from_domain == "mailrun.local"
    assert b"\r\n" in built.data and b"\n" not in built.data.replace(b"\r\n", b"")


def test_html_is_an_alternative_after_the_text() -> None:
    message = parsed(build_message(due(OutboundSpec(html="<p>the <b>html</b></p>")), REPLY).data)
    assert message.get_content_type() == "multipart/alternative"
    plain, html = message.iter_parts()
    assert (plain.get_content_type(), plain.get_content()) == ("text/plain", "the text\n")
    assert html.get_content_type() == "text/html"
    assert html.get_content() == "<p>the <b>html</b></p>\n"
    assert message.get_body(preferencelist=("html",)) is html


def test_attachments_make_it_mixed_with_their_types_names_and_bytes() -> None:
    spec = OutboundSpec(html="<p>hi</p>", attachments=(PDF, NOTE))
    message = parsed(build_message(due(spec), REPLY).data)
    assert message.get_content_type() == "multipart/mixed"
    body = message.get_body(preferencelist=("plain",))
    assert body is not None and body.get_content() == "the text\n"
    alternative = next(message.iter_parts())
    assert alternative.get_content_type() == "multipart/alternative"
    got = [
        (a.get_filename(), a.get_content_type(), a.get_payload(decode=True))
        for a in message.iter_attachments()
    ]
    assert got == [
        ("report.pdf", "application/pdf", PDF.data),
        ("notes ü.txt", "text/plain", NOTE.data),
    ]


def test_text_with_attachments_and_no_html_is_mixed_around_the_text() -> None:
    message = parsed(build_message(due(OutboundSpec(attachments=(PDF,))), REPLY).data)
    assert message.get_content_type() == "multipart/mixed"
    text, attachment = message.iter_parts()
    assert (text.get_content_type(), text.get_content()) == ("text/plain", "the text\n")
    assert attachment.get_filename() == "report.pdf"


def test_non_ascii_subject_display_names_and_headers_are_rfc_2047() -> None:
    spec = OutboundSpec(
        cc=("Zoë Ünder <zoe@example.org>", "bob@example.org"),
        reply_to="Støtte <support@example.org>",
        headers={"X-Mood": "très bien"},
    )
    built = build_message(due(spec, subject="Grüße aus Köln", body="ünïcödé\n".encode()), REPLY)
    assert built.data.isascii() and not built.smtputf8
    assert b"=?utf-8?" in built.data
    message = parsed(built.data)
    assert message["Subject"] == "Grüße aus Köln"
    (zoe, bob) = message["Cc"].addresses
    assert (zoe.display_name, zoe.addr_spec, bob.addr_spec) == (
        "Zoë Ünder",
        "zoe@example.org",
        "bob@example.org",
    )
    assert message["Reply-To"].addresses[0].display_name == "Støtte"
    assert message["X-Mood"] == "très bien"
    # Base64 or quoted-printable, as the email package chose: the text, CRLF its line end.
    assert message.get_content() == "ünïcödé\r\n"
    # Cc are recipients too: each once, To first.
    assert built.recipients == (TO, "zoe@example.org", "bob@example.org")


def test_an_address_that_is_not_ascii_makes_the_message_smtputf8() -> None:
    built = build_message(due(OutboundSpec(cc=("zoë@exämple.org",))), REPLY)
    assert built.smtputf8
    assert "zoë@exämple.org".encode() in built.data
    assert parsed(built.data)["Cc"] == "zoë@exämple.org"


def test_threading_headers_and_the_runs_own_headers_are_written_as_given() -> None:
    spec = OutboundSpec(
        in_reply_to="<q-2@example.org>",
        references=("<q-1@example.org>", "<q-2@example.org>"),
        headers={"X-Order": "7", "List-Id": "<orders.example.org>"},
        reply_to="desk@example.org",
    )
    message = parsed(build_message(due(spec), REPLY).data)
    assert message["In-Reply-To"] == "<q-2@example.org>"
    assert message["References"] == "<q-1@example.org> <q-2@example.org>"
    assert (message["X-Order"], message["List-Id"]) == ("7", "<orders.example.org>")
    # A Reply-To of the run's own replaces the signed one.
    assert message.get_all("Reply-To") == ["desk@example.org"]


def test_the_same_row_is_the_same_bytes_on_every_attempt() -> None:
    mail = due(OutboundSpec(html="<p>x</p>", attachments=(PDF,)))
    first = build_message(mail, REPLY).data
    again = build_message(dataclasses.replace(mail, attempts=3), REPLY).data
    assert first == again
    # The boundaries are the mail's, not the moment's: another mail has others.
    other = build_message(due(OutboundSpec(html="<p>x</p>", attachments=(PDF,))), REPLY).data
    assert other != first


def test_a_body_that_is_not_utf8_goes_as_bytes() -> None:
    message = parsed(build_message(due(body=b"\xff\xfe"), REPLY).data)
    assert message.get_content_type() == "application/octet-stream"
    assert message.get_content() == b"\xff\xfe"


def outbound(spec: OutboundSpec, **changes: object) -> OutboundMail:
    fields: dict[str, object] = dict(
        deployment_id="dep_1", run_id="run_1", event_id="evt_1", send_key="k", sender=SENDER,
        recipient=TO, subject="s", body=b"", spec=spec,
    )  # fmt: skip
    fields.update(changes)
    return OutboundMail(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["From", "to", "CC", "Bcc", "Subject", "Date", "Message-ID",
                                  "Reply-To", "In-Reply-To", "References", "MIME-Version",
                                  "Content-Type", "content-transfer-encoding", "DKIM-Signature",
                                  "Return-Path", "Sender"])  # fmt: skip
def test_a_header_the_hub_writes_is_refused(name: str) -> None:
    why = unsendable(outbound(OutboundSpec(headers={name: "x@example.org"})))
    assert why == f"invalid_mail: header {name!r} is one the hub writes"


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (OutboundSpec(headers={"X-A": "one\r\nBcc: victim@example.org"}), "invalid_mail: header"),
        (OutboundSpec(headers={"X-A\nB": "v"}), "invalid_mail: header name"),
        (OutboundSpec(headers={"X A": "v"}), "invalid_mail: header name"),
        (OutboundSpec(headers={"X-Long": "v" * 1000}), "invalid_mail: header"),
        (OutboundSpec(cc=("not an address",)), "invalid_address: Cc"),
        (OutboundSpec(cc=("a@b.c, d@e.f",)), "invalid_address: Cc"),
        (OutboundSpec(cc=("a@b.c\r\nBcc: d@e.f",)), "invalid_address: Cc"),
        (OutboundSpec(reply_to="nobody"), "invalid_address: Reply-To"),
        (OutboundSpec(in_reply_to="order-7"), "invalid_mail: In-Reply-To"),
        (OutboundSpec(references=("<a@b>", "<c@d>\r\nX: y")), "invalid_mail: References"),
        (OutboundSpec(attachments=(Attachment(filename="a\r\nb.txt"),)), "invalid_mail: attach"),
        (OutboundSpec(attachments=(Attachment(filename="../x"),)), "invalid_mail: attach"),
        (OutboundSpec(attachments=(Attachment(filename=""),)), "invalid_mail: attach"),
        (
            OutboundSpec(attachments=(Attachment(filename="a", content_type="pdf"),)),
            "invalid_mail: attachment 'a': content type",
        ),
        (
            OutboundSpec(attachments=(Attachment(filename="a", content_type="multipart/x"),)),
            "invalid_mail: attachment 'a': a multipart",
        ),
    ],
)
def test_what_can_never_be_a_message_is_refused_with_its_reason(
    spec: OutboundSpec, why: str
) -> None:
    found = unsendable(outbound(spec))
    assert found is not None and found.startswith(why), found


def test_what_can_be_a_message_is_not_refused() -> None:
    spec = OutboundSpec(
        html="<p>x</p>",
        cc=("Zoë <zoë@example.org>", '"Doe, J" <j@example.org>'),
        reply_to="desk@example.org",
        in_reply_to="<a@b>",
        references=("<a@b>",),
        headers={"X-Order": "7", "List-Unsubscribe": "<mailto:u@example.org>"},
        attachments=(PDF, NOTE),
    )
    assert unsendable(outbound(spec, header_id="<dsp_1.1@mailrun.local>")) is None
    assert unsendable(outbound(spec, header_id="dsp_1.1")) == (
        "invalid_mail: Message-ID 'dsp_1.1' is not one <message-id>"
    )
