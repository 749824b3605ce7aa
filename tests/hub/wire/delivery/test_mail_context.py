"""A mail's context on the wire: what the hub read from a mail reaches the
sidecar in ``MailInbound.context``, and mail one deployment's run sends
another (``MailSent``) gets a context too, its reply routed back to the run
that sent it."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import anyio
import msgspec
import pytest

from hub.intake import mail_trigger
from hub.store import Accepted, accept_triggers
from runtime import EventsAck, MailSent, Welcome, new_id
from runtime.wire import IngressMail, MailContext
from tests.support import wait_for
from tests.support.harnesses.wire import Inbox, Sidecar, deploy, owned, running_hub, send

pytestmark = pytest.mark.anyio


async def test_the_context_reaches_the_sidecar_with_the_dispatch(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store, "owner")
        to = dep.address.replace("@", "+Urgent@")
        mail = IngressMail(to=to, subject="s", in_reply_to="<b@x>", references=["<a@x>", "<b@x>"])
        trigger = mail_trigger(mail, max_body=1 << 20)
        (receipt,), _ = await hub.store.transact(partial(accept_triggers, triggers=[trigger]))
        assert isinstance(receipt, Accepted)
        car = Sidecar(hub, dep)
        assert isinstance(await car.hello(), Welcome)
        inbox = Inbox()
        await tg.start(inbox.serve, car)
        hub.wire.on_accepted({dep.id})
        await wait_for(lambda: inbox.frames, what="the dispatch")
        [frame] = inbox.frames
        assert frame.dispatch_id == receipt.dispatch_id
        assert frame.context == MailContext(
            to=to, tag="Urgent", in_reply_to="<b@x>", thread=["<a@x>", "<b@x>"]
        )
        tg.cancel_scope.cancel()


async def test_mail_between_deployments_has_a_context_and_its_reply_finds_the_run(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        car, (asker,) = await owned(hub, 1, "asker")
        other, (answerer,) = await owned(hub, 1, "answerer")
        # The asking run mails the other deployment, at a tag of its address.
        asked = MailSent(
            event_id=new_id("evt"), run_id=asker.run_id, to=other.dep.address.replace("@", "+q@"),
            subject="?", message_id=f"{asker.dispatch_id}:mail:0",
            header_id=f"<{asker.dispatch_id}.0@mailrun.local>",
        )  # fmt: skip
        assert isinstance(await send(car, asked), EventsAck)
        there = await hub.one(
            "SELECT run_id, context FROM workflow_run_dispatch WHERE message_id = ?",
            asked.message_id,
        )
        assert there["run_id"] == answerer.run_id
        assert decode(there["context"]) == MailContext(to=asked.to, tag="q")

        # The answer names the question's Message-ID: it reaches the asking run.
        for n, replied in enumerate([asked.header_id, asked.message_id]):
            answer = MailSent(
                event_id=new_id("evt"), run_id=answerer.run_id, to=car.dep.address,
                subject="!", message_id=f"{answerer.dispatch_id}:mail:{n}", in_reply_to=replied,
            )  # fmt: skip
            assert isinstance(await send(other, answer), EventsAck)
            back = await hub.one(
                "SELECT run_id, context FROM workflow_run_dispatch WHERE message_id = ?",
                answer.message_id,
            )
            assert back["run_id"] == asker.run_id
            assert decode(back["context"]).routed_by == "headers"


def decode(data: bytes) -> MailContext:
    return msgspec.msgpack.decode(bytes(data), type=MailContext)
