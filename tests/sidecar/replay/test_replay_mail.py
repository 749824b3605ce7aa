"""Replay of mail that behaves like mail: the replayed item has the mail's
context (tag, thread), ``ctx.send`` returns the Message-ID the run's did
(the deployment's domain), and a mail's rich parts are compared."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import MailSent, RecordedEffect, ReplayItem, ReplayJob
from runtime.sidecar_contract import Recorded, effect_of
from runtime.wire import Attachment, MailContext
from sidecar.replay._run import replay

pytestmark = pytest.mark.anyio

DSP = "dsp_" + "1" * 26
SENT_ID = f"<{DSP}.1@example.com>"

FLOW = """
async def main(ctx, item):
    ctx.state["sent"] = ctx.send(
        "ann@example.net",
        "Re: " + item.subject,
        "plain",
        html="<p>" + item.tag + "</p>",
        in_reply_to=item.in_reply_to,
        attachments=[("a.csv", b"a,b")],
    )
"""


def recorded_mail(html: str = "<p>vip</p>", data: bytes = b"a,b") -> RecordedEffect:
    """The effect the run recorded, as the hub makes it from the event it keeps."""
    event = MailSent(
        event_id="evt_1",
        run_id="run_1",
        at=1.0,
        to="ann@example.net",
        subject="Re: order",
        body=b"plain",
        message_id=f"{DSP}:mail:1",
        header_id=SENT_ID,
        html=html,
        in_reply_to="<q@example.net>",
        attachments=[Attachment(filename="a.csv", content_type="text/csv", data=data)],
    )
    effect = effect_of(event)
    assert effect is not None
    return effect


def job(source: str, effect: RecordedEffect) -> ReplayJob:
    item = ReplayItem(
        dispatch_id=DSP,
        seq=1,
        subject="order",
        message_id="<q@example.net>",
        body=b"",
        step=1,
        version=1,
        context=MailContext(to="desk+vip@example.com", tag="vip", in_reply_to="<q@example.net>"),
        recorded=Recorded(state={"sent": SENT_ID}, effects=[effect]),
    )
    return ReplayJob(
        files={"flow.py": source},
        entrypoint="flow:main",
        deployment_id="dep_" + "2" * 26,
        run_id="run_" + "3" * 26,
        address="desk@example.com",
        items=[item],
    )


async def test_the_same_code_with_the_mail_s_context_finds_no_difference(tmp_path: Path) -> None:
    report = await replay(job(FLOW, recorded_mail()), tmp_path / "src")
    assert report.difference is None and report.replayed == 1


@pytest.mark.parametrize(
    ("recorded", "part"),
    [(recorded_mail(html="<p>VIP</p>"), "html"), (recorded_mail(data=b"a;b"), "attachments")],
)
async def test_a_changed_rich_part_is_a_difference_of_effects(
    tmp_path: Path, recorded: RecordedEffect, part: str
) -> None:
    report = await replay(job(FLOW, recorded), tmp_path / "src")
    difference = report.difference
    assert difference is not None and difference.what == "effects"
    (before,) = difference.recorded["effects"]
    (after,) = difference.replayed["effects"]
    assert before[part] != after[part]
    assert {k: v for k, v in before.items() if k != part} == {
        k: v for k, v in after.items() if k != part
    }
    assert after["in_reply_to"] == "<q@example.net>"
    assert after["html"].startswith("sha256:")
