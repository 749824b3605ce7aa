"""Mail that leaves, through real processes: a run's ``ctx.send`` to an outside
address reaches a real SMTP server (aiosmtpd on a loopback port) once, also
when the hub is killed after the relay accepted it and before it recorded
that (then twice, with one Message-ID, the copy marked in doubt)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support import wait_for
from tests.support.servers.smtp import SmtpServer

from ..harness import MAILRUN, Up, mailrun_up

pytestmark = pytest.mark.anyio

OUTSIDE = "someone@example.org"

SENDER = """
async def main(ctx, item):
    ctx.send("someone@example.org", "re: " + item.subject, "hello from " + ctx.run_id)
"""

# Compressed retry delays (the relay's included): a test waits seconds, not minutes.
FAST = {"MAILRUN_BACKOFF_MAX": "0.2"}


async def outbox(up: Up) -> list[dict[str, Any]]:
    r = await up.http.get("/outbox")
    assert r.status_code == 200, r.text
    return list(r.json()["outbox"])


async def mail_of(up: Up, subject: str, status: str, timeout: float = 60) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        for mail in await outbox(up):
            if mail["subject"] == subject and mail["status"] == status:
                return mail
        return None

    return await wait_for(probe, timeout=timeout, what=f"outgoing {subject!r} {status}")


async def test_ctx_send_to_an_outside_address_reaches_the_relay_once(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    # First without a relay: the mail is kept, visible, and goes nowhere.
    async with mailrun_up(tmp_path, env=FAST) as up:
        dep = await up.deploy("notifier", SENDER)
        assert (await up.send(dep["address"], "first")).status_code == 202
        kept = await mail_of(up, "re: first", "no_relay")
    assert smtp.recorder.received == []
    # The same state dir under a hub with a relay: it leaves, once.
    async with mailrun_up(tmp_path, "--smtp-relay", smtp.address, env=FAST) as up:
        sent = await mail_of(up, "re: first", "sent")
        # Later mail sent as well: the relay loop moved on past the first.
        assert (await up.send(dep["address"], "second")).status_code == 202
        await mail_of(up, "re: second", "sent")
        listing = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [MAILRUN, "outbox", "--status", "sent", "--json", *up.hub_options],
                capture_output=True,
                check=True,
            )
        )
    (copy,) = smtp.recorder.copies(kept["message_id"])
    assert copy.rcpt_tos == [OUTSIDE] and copy.message["From"] == dep["address"]
    # The envelope sender is the mail's signed bounce address (docs/smtp.md, "Bounces").
    assert copy.mail_from.startswith("bounces+r-") and copy.mail_from.endswith("@mailrun.local")
    assert copy.message["Subject"] == "re: first"
    assert copy.message.get_content().startswith("hello from run_")
    # The Message-ID ctx.send returned: the dispatch and the send's index.
    assert re.fullmatch(r"<dsp_[0-9a-f]{26}\.1@mailrun\.local>", kept["message_id"])
    assert (sent["id"], sent["attempts"], sent["in_doubt"]) == (kept["id"], 1, False)
    assert sent["relay_answer"].startswith("250 ")
    assert len(smtp.recorder.received) == 2
    shown = json.loads(listing.stdout)["outbox"]
    assert [m["subject"] for m in shown] == ["re: first", "re: second"]


async def test_a_hub_killed_after_the_relay_accepted_sends_again_with_the_same_message_id(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    """The window SMTP leaves: the relay answered 250, the hub died before it
    recorded that. The restarted hub sends the mail again, with the same
    Message-ID (the receiver can drop the copy by it), and marks it in doubt."""
    gate = tmp_path / "relay-gate"
    reached = Path(f"{gate}.reached")
    env = {**FAST, "MAILRUN_FAILPOINTS": f"hub.relay.after_send=pause({gate})"}
    async with mailrun_up(tmp_path, "--smtp-relay", smtp.address, env=env) as up:
        dep = await up.deploy("notifier", SENDER)
        assert (await up.send(dep["address"], "only")).status_code == 202
        await wait_for(reached.exists, timeout=60, what="the relay's first 250")
        (first,) = smtp.recorder.received
        during = await mail_of(up, "re: only", "sending")
        assert during["attempts"] == 1

        await anyio.Path(reached).unlink()
        hub = await up.hub_pid()
        os.kill(hub, signal.SIGKILL)  # between the relay's 250 and the `sent` commit
        await wait_for(reached.exists, timeout=60, what="the restarted hub's send")
        assert await up.hub_pid() != hub
        await anyio.Path(gate).touch()
        sent = await mail_of(up, "re: only", "sent")

    copies = smtp.recorder.copies(during["message_id"])
    assert len(copies) == 2 and copies[0] is first
    assert {c.message["Date"] for c in copies} == {first.message["Date"]}
    assert (sent["attempts"], sent["in_doubt"]) == (2, True)
    assert sent["relay_answer"] == "250 2.0.0 queued as q2"
    assert len(smtp.recorder.received) == 2
