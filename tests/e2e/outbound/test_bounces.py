"""Bounces reach the run, through real processes (`mailrun up`, its hub and a
sidecar, an aiosmtpd sink as the relay): a relay's 550 reaches the run once
also when the hub is killed between the refusal and its record, and a
delivery status notification sent with ``smtplib`` to the hub's own
``--smtp`` at the mail's bounce address reaches it once."""

from __future__ import annotations

import os
import signal
import smtplib
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support import free_port, wait_for
from tests.support.servers.smtp import SmtpServer, delivery_report

from ..harness import Up, mailrun_up

pytestmark = pytest.mark.anyio

FAST = {"MAILRUN_BACKOFF_MAX": "0.2"}
GONE = "gone@example.org"
REFUSAL = "550 5.1.1 <gone@example.org>: mailbox unknown"

NOTIFIER = """
import json


async def main(ctx, item):
    if item.kind == "bounce":
        ctx.state.setdefault("bounces", []).append(json.loads(item.text))
    elif item.kind == "mail":
        ctx.send("gone@example.org", "notice", "hello")
"""


async def bounced(up: Up, run_id: str) -> dict[str, Any]:
    return await up.wait_state(
        run_id, lambda r: len(r["state"].get("bounces", [])) >= 1, what="the run's bounce"
    )


def bounce_items(up: Up) -> list[tuple[Any, ...]]:
    return up.query(
        "SELECT run_id, message_id, subject FROM workflow_run_dispatch WHERE kind = 'bounce'"
    )


async def test_a_hub_killed_between_the_relay_s_refusal_and_its_record_bounces_once(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    smtp.recorder.answers[GONE] = [REFUSAL] * 2
    gate = tmp_path / "refusal-gate"
    reached = Path(f"{gate}.reached")
    env = {**FAST, "MAILRUN_FAILPOINTS": f"hub.relay.after_refusal=pause({gate})"}
    async with mailrun_up(tmp_path, "--smtp-relay", smtp.address, env=env) as up:
        dep = await up.deploy("notifier", NOTIFIER)
        r = await up.send(dep["address"], "go")
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        await wait_for(reached.exists, timeout=60, what="the relay's first refusal")
        assert smtp.recorder.refused == [REFUSAL]
        assert bounce_items(up) == []

        await anyio.Path(reached).unlink()
        hub = await up.hub_pid()
        os.kill(hub, signal.SIGKILL)  # between the relay's 550 and the bounce's commit
        await wait_for(reached.exists, timeout=60, what="the restarted hub's refusal")
        assert await up.hub_pid() != hub
        await anyio.Path(gate).touch()
        run = await bounced(up, run_id)
        (mail,) = up.query(
            "SELECT id, message_id, status, in_doubt, attempts, bounce_source FROM outbound_mail"
        )
        items = bounce_items(up)

    (report,) = run["state"]["bounces"]
    row_id, message_id = mail[0], mail[1]
    assert mail[2:] == ("bounced", 1, 2, "relay")
    assert items == [(run_id, f"bounce:{row_id}", message_id)]
    assert report["message_id"] == message_id
    assert (report["recipient"], report["status"], report["source"]) == (GONE, "5.1.1", "relay")
    assert report["diagnostic"] == REFUSAL
    assert smtp.recorder.refused == [REFUSAL, REFUSAL]


async def test_a_dsn_to_the_hub_s_smtp_reaches_the_run_once(
    tmp_path: Path, smtp: SmtpServer
) -> None:
    port = free_port()
    extra = ("--smtp", f"127.0.0.1:{port}", "--smtp-relay", smtp.address)
    async with mailrun_up(tmp_path, *extra, env=FAST) as up:
        dep = await up.deploy("notifier", NOTIFIER)
        r = await up.send(dep["address"], "go")
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        (copy,) = await wait_for(lambda: smtp.recorder.received, what="the mail at the relay")
        report = delivery_report(copy.mail_from, copy.message_id, GONE)

        def deliver() -> None:
            with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
                for _ in range(2):  # the reporting MTA retried: still once
                    assert client.sendmail("", [copy.mail_from], report) == {}

        await anyio.to_thread.run_sync(deliver)
        run = await bounced(up, run_id)
        items = bounce_items(up)
        (mail,) = up.query("SELECT status, bounce_source, bounce_status FROM outbound_mail")
    (got,) = run["state"]["bounces"]
    assert (got["message_id"], got["recipient"], got["source"]) == (copy.message_id, GONE, "dsn")
    assert len(items) == 1 and items[0][0] == run_id
    assert mail == ("bounced", "dsn", "5.1.1")
