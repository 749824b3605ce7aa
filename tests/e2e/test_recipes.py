"""docs/recipes.md, run: each recipe block is deployed to a real ``mailrun up``
(with a real SMTP server as its relay) and driven to the outcome the page
promises."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_for
from tests.support.smtp import SmtpServer

from .harness import Up, mailrun_up

pytestmark = pytest.mark.anyio

PAGE = Path(__file__).parents[2] / "docs" / "recipes.md"
_BLOCK = re.compile(r"<!-- recipe: ([\w-]+) -->\n```python\n(.*?)```", re.S)


def recipes() -> dict[str, str]:
    return dict(_BLOCK.findall(PAGE.read_text(encoding="utf-8")))


def test_the_page_has_the_four_recipes() -> None:
    assert sorted(recipes()) == ["approval", "fan-out", "reply", "signals"]


async def _mail(up: Up, to: str, subject: str, body: str = "", **extra: Any) -> str:
    r = await up.send(to, subject, body, **extra)
    assert r.status_code == 202, r.text
    return str(r.json()["run_id"])


async def _signal(up: Up, run_id: str, name: str, **extra: Any) -> None:
    r = await up.http.post(f"/runs/{run_id}/signals", json={"name": name, **extra})
    assert r.status_code == 202, r.text


async def test_every_recipe_does_what_the_page_says(tmp_path: Path, smtp: SmtpServer) -> None:
    found = recipes()
    fast = {"MAILRUN_BACKOFF_MAX": "0.2"}
    async with mailrun_up(tmp_path, "--smtp-relay", smtp.address, env=fast) as up:
        deps = {name: await up.deploy(name, source) for name, source in found.items()}

        # Fan-out and fan-in: one child per word, the lengths summed.
        fan = await _mail(up, deps["fan-out"]["address"], "count", "alpha be gamma")
        run = await up.wait_state(fan, lambda r: r["status"] == "completed")
        assert run["result"] == {"total": 12}
        children = up.query("SELECT status FROM workflow_run WHERE parent_run_id = ?", fan)
        assert children == [("completed",)] * 3

        # An approval gate: two mails held while waiting, then the decision.
        gated = deps["approval"]["address"]
        order = await _mail(up, gated, "order-7")
        run = await up.wait_state(order, lambda r: r["status"] == "waiting")
        for subject in ("later 1", "later 2"):
            await _mail(up, gated, subject)
        r = await up.http.post(
            f"/approvals/{run['state']['approval']}", json={"decision": "approve"}
        )
        assert r.status_code == 202, r.text
        run = await up.wait_state(order, lambda r: r["status"] == "completed")
        assert run["result"] == ["later 1", "later 2"]
        assert run["state"]["decision"] == "approve"

        # Signals drive a state machine; a retried signal counts once.
        machine = await _mail(up, deps["signals"]["address"], "hello")
        await _signal(up, machine, "start")
        for _ in range(2):
            await _signal(up, machine, "pause", payload={"why": "lunch"}, message_id="p-1")
        await _signal(up, machine, "bogus")
        await _signal(up, machine, "resume")
        await _signal(up, machine, "finish")
        run = await up.wait_state(machine, lambda r: r["status"] == "completed")
        assert run["result"] == [
            ["start", None],
            ["pause", {"why": "lunch"}],
            ["resume", None],
            ["finish", None],
        ]
        assert run["state"]["ignored"] == ["bogus"]

        # A reply leaves through the relay, once.
        await _mail(up, deps["reply"]["address"], "hi", "there", **{"from": "alice@example.org"})

        def replied() -> bool:
            return len(smtp.recorder.received) >= 1

        await wait_for(replied, timeout=30, what="the reply at the relay")
        (reply,) = smtp.recorder.received
        assert reply.rcpt_tos == ["alice@example.org"]
        assert reply.message["Subject"] == "Re: hi"
        assert reply.message.get_content().strip() == "Got it: there"
