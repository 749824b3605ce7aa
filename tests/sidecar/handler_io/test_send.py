"""``ctx.send``: the Message-ID it returns, the rich parts it puts in
``MailSent``, and what it refuses (with nothing of the item committed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import DispatchProcessed, MailSent, read_restore_record, write_restore_record
from runtime.wire import MAX_MAIL, Attachment, MailContext
from sidecar import Context, InvalidMail, LimitExceeded
from sidecar.testing import WorkflowTest
from tests.support.harnesses.sidecar import deployed_sidecar, mail, make_deployment

pytestmark = pytest.mark.anyio

DSP = "dsp_" + "1" * 26


def context(domain: str = "example.org") -> Context:
    return Context(
        run_id="run_1",
        deployment_id="dep_1",
        dispatch_id=DSP,
        state={},
        minter=None,
        mail_domain=domain,
    )


def sent(ctx: Context) -> list[MailSent]:
    return [e for e in ctx.events if isinstance(e, MailSent)]


def test_send_returns_the_message_id_the_mail_carries_the_same_when_processed_again() -> None:
    first = context()
    ids = [first.send("a@example.net", "one"), first.send("b@example.net", "two")]
    assert ids == [f"<{DSP}.1@example.org>", f"<{DSP}.2@example.org>"]
    assert [m.header_id for m in sent(first)] == ids
    assert [m.message_id for m in sent(first)] == [f"{DSP}:mail:1", f"{DSP}:mail:2"]
    again = context()  # the same item processed again (a retry, a takeover)
    assert [again.send("a@example.net", "one"), again.send("b@example.net", "two")] == ids


def test_a_plain_send_has_no_rich_parts_and_encodes_as_before() -> None:
    ctx = context()
    ctx.send("a@example.net", "hi", "body")
    (mail,) = sent(ctx)
    assert (mail.html, mail.cc, mail.reply_to, mail.in_reply_to) == (None, [], None, None)
    assert (mail.references, mail.headers, mail.attachments) == ([], {}, [])
    assert mail.body == b"body"


def test_the_rich_parts_reach_the_event() -> None:
    ctx = context()
    ctx.send(
        "a@example.net",
        "Grüße",
        "plain",
        html="<p>rich</p>",
        cc="c@example.net",
        reply_to="desk@example.org",
        in_reply_to="first@example.net",
        references=["<zero@example.net>", "<first@example.net>"],
        headers={"X-Ticket": "42"},
        attachments=[
            ("report.csv", b"a,b\n"),
            ("notes", "text", "text/plain"),
            Attachment(filename="x.bin", data=b"\0\1"),
        ],
    )
    (mail,) = sent(ctx)
    assert mail.html == "<p>rich</p>"
    assert mail.cc == ["c@example.net"]  # one address given as a string, not its letters
    assert mail.reply_to == "desk@example.org"
    assert mail.in_reply_to == "<first@example.net>"  # the angle brackets added
    assert mail.references == ["<zero@example.net>", "<first@example.net>"]
    assert mail.headers == {"X-Ticket": "42"}
    assert mail.attachments == [
        Attachment(filename="report.csv", content_type="text/csv", data=b"a,b\n"),
        Attachment(filename="notes", content_type="text/plain", data=b"text"),
        Attachment(filename="x.bin", content_type="application/octet-stream", data=b"\0\1"),
    ]
    # What the sidecar ships decodes as it was made.
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(mail), type=MailSent) == mail


def test_an_attachment_s_type_is_guessed_from_its_name_else_octet_stream() -> None:
    ctx = context()
    ctx.send("a@example.net", attachments=[("a.pdf", b"%PDF"), ("data", b"?")])
    types = [a.content_type for a in sent(ctx)[0].attachments]
    assert types == ["application/pdf", "application/octet-stream"]


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("", {}, "recipient"),
    ("Ann <a@example.net>", {}, "one address"),
    ("a@example.net, b@example.net", {}, "one address"),
    ("no-at-sign", {}, "one address"),
    ("a\x00b@example.net", {}, "one address"),
    ("a@example.net", {"cc": ["ok@example.net", "bad"]}, "cc"),
    ("a@example.net", {"reply_to": "x\r\nBcc: evil@example.net"}, "reply_to"),
    ("a@example.net", {"subject": "hi\r\nBcc: evil@example.net"}, "line break"),
    ("a@example.net", {"headers": {"X-A": "1\nBcc: evil@example.net"}}, "line break"),
    ("a@example.net", {"headers": {"X A": "1"}}, "not a header name"),
    ("a@example.net", {"headers": {"X:A": "1"}}, "not a header name"),
    ("a@example.net", {"headers": {"From": "ceo@example.org"}}, "written by the hub"),
    ("a@example.net", {"headers": {"dkim-signature": "v=1"}}, "written by the hub"),
    ("a@example.net", {"headers": {"Content-Type": "text/html"}}, "written by the hub"),
    ("a@example.net", {"headers": {"X-A": "1", "x-a": "2"}}, "twice"),
    ("a@example.net", {"headers": {"X-A": 1}}, "string"),
    ("a@example.net", {"in_reply_to": "<two words@x>"}, "Message-ID"),
    ("a@example.net", {"in_reply_to": "<a\x01b@x>"}, "Message-ID"),
    ("a@example.net", {"references": ["<ok@x>", ""]}, "Message-ID"),
    ("a@example.net", {"html": b"<p>"}, "html"),
    ("a@example.net", {"attachments": ["a.txt"]}, "attachment"),
    ("a@example.net", {"attachments": [("", b"x")]}, "filename"),
    ("a@example.net", {"attachments": [("a\r\n.txt", b"x")]}, "line break"),
    ("a@example.net", {"attachments": [("a.txt", 42)]}, "bytes"),
    ("a@example.net", {"attachments": [("a.txt", b"x", "text")]}, "content type"),
]


@pytest.mark.parametrize(("to", "options", "text"), REFUSED)
def test_what_makes_no_mail_is_refused_with_a_typed_error(
    to: str, options: dict[str, Any], text: str
) -> None:
    ctx = context()
    subject = options.pop("subject", "s")
    with pytest.raises(InvalidMail, match=text) as raised:
        ctx.send(to, subject, "b", **options)
    assert isinstance(raised.value, ValueError)  # what ctx.send raised before
    assert ctx.events == []


def test_the_whole_mail_is_held_to_max_mail() -> None:
    half = b"x" * (MAX_MAIL.bytes // 2 + 10)
    ctx = context()
    ctx.send("a@example.net", "s", half)  # the body alone fits
    with pytest.raises(LimitExceeded, match="html"):
        ctx.send("a@example.net", "s", half, attachments=[("big.bin", half)])
    with pytest.raises(LimitExceeded):
        ctx.send("a@example.net", "s", half, html=half.decode())
    assert len(sent(ctx)) == 1


async def test_a_refused_send_commits_nothing_of_the_item() -> None:
    async def main(ctx: Context, item: Any) -> None:
        ctx.state["seen"] = item.subject
        first = ctx.send("ok@example.net", "first")
        ctx.state["first"] = first
        if item.subject == "bad":
            ctx.send("ok@example.net", "second", headers={"Subject": "forged"})

    async with WorkflowTest(main, max_attempts=1, on_failure="park") as wf:
        await wf.mail("good")
        assert wf.state["first"] == wf.sent[0].header_id
        assert wf.sent[0].header_id.endswith("@mailrun.local>")
        await wf.mail("bad")
        # The failed item's state and mail are gone; the earlier ones stay.
        assert wf.state["seen"] == "good"
        assert [m.subject for m in wf.sent] == ["first"]


ANSWERS = """
async def main(ctx, item):
    ctx.state["tag"] = item.tag
    ctx.state["sent"] = ctx.send(item.sender, "Re: " + item.subject, in_reply_to=item.message_id)
"""


async def test_a_sidecar_sends_under_its_address_s_domain_what_its_item_s_context_says(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path, source=ANSWERS)
    record, _ = read_restore_record(dep.record_file)
    dep.address = "desk@example.com"
    write_restore_record(dep.record_file, msgspec.structs.replace(record, address=dep.address))
    context = MailContext(to="desk+vip@example.com", tag="vip")
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "hi", message_id="<q@example.net>", context=context))
        await hub.wait_events(DispatchProcessed, 1)
    (sent,) = hub.of_kind(MailSent)
    (processed,) = hub.of_kind(DispatchProcessed)
    assert sent.header_id == f"<{sent.message_id.replace(':mail:', '.')}@example.com>"
    assert processed.state == {"tag": "vip", "sent": sent.header_id}
    assert (sent.to, sent.in_reply_to) == ("sender@example.org", "<q@example.net>")
