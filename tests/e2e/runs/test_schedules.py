"""Schedules with real processes: a schedule added by `mailrun schedule add`
fires into the deployment's top-level run; with the hub killed for several
intervals, the missed fires come as one late fire when it is back, with no
double fire, and the fires go on after it; `mailrun schedule remove` stops
them, while the deployment's other schedule goes on. On SQLite: the fire on
PostgreSQL (one hub of several under the ``schedules`` role, two stores
firing one due time making one dispatch) is proven at the store
(tests/hub/store/clock/test_schedules.py), on both databases."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support import wait_for

from ..harness import Up, mailrun, mailrun_up, restarted_hub

pytestmark = pytest.mark.anyio

TICKER = """
async def main(ctx, item):
    if item.kind == "schedule":
        ctx.state.setdefault("fires", []).append({
            "schedule_id": item.schedule_id,
            "subject": item.subject,
            "payload": item.payload,
            "due_at": item.due_at,
            "fired_at": item.fired_at,
        })
"""

DOWN = 3.0
"""Seconds (intervals of the every-1 schedules) the hub stays down, at least:
several intervals missed, to be fired as one."""


def fires(run: Any, subject: str) -> list[dict[str, Any]]:
    return [f for f in run["state"].get("fires", []) if f["subject"] == subject]


async def add(up: Up, *args: str) -> dict[str, Any]:
    code, out = await mailrun(up, "schedule", "add", "ticker", *args, "--json")
    assert code == 0, out
    return dict(json.loads(out))


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_schedules_fire_once_after_an_outage_and_stop_when_removed(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        await up.deploy("ticker", TICKER)
        code, out = await mailrun(up, "schedule", "add", "ticker", "--every", "0.5")
        assert code == 1 and "invalid_schedule" in out, out
        code, out = await mailrun(up, "schedule", "add", "ticker", "--every", "1",
                                  "--payload", "{nope")  # fmt: skip
        assert code == 2 and "--payload" in out, out

        a = await add(up, "--every", "1", "--subject", "a", "--payload", '{"n": 1}')
        b = await add(up, "--every", "1", "--subject", "b")
        code, out = await mailrun(up, "schedule", "list", "ticker")
        assert code == 0 and a["id"] in out and b["id"] in out and "every 1s" in out, out

        def top_level() -> str | None:
            found = up.query("SELECT DISTINCT run_id FROM workflow_run_dispatch")
            assert len(found) <= 1, found  # every fire goes to the one top-level run
            return str(found[0][0]) if found else None

        run_id = await wait_for(top_level, what="the first fire")
        run = await up.wait_state(run_id, lambda r: len(fires(r, "a")) >= 2, what="two fires")
        first = fires(run, "a")[0]
        assert first["schedule_id"] == a["id"] and first["payload"] == {"n": 1}
        assert first["due_at"] == a["next_due"]

        # The hub killed, and kept down (its supervisor stopped) for several intervals.
        boot_before = (await up.healthz() or {})["boot_id"]
        hub_pid = await up.hub_pid()
        os.kill(up.proc.pid, signal.SIGSTOP)
        try:
            os.kill(hub_pid, signal.SIGKILL)
            await wait_for(lambda: gone(hub_pid), what="the hub gone")
            killed_at = time.time()

            def overdue() -> bool:
                found = up.query("SELECT MAX(next_due) FROM schedule")
                return float(found[0][0]) < time.time() - DOWN

            await wait_for(overdue, timeout=30, what=f"every schedule {DOWN:g} intervals overdue")
        finally:
            os.kill(up.proc.pid, signal.SIGCONT)

        await restarted_hub(up, boot_before)

        def after_the_late_one(r: Any) -> bool:
            late = [f for f in fires(r, "a") if f["fired_at"] > killed_at]
            return len(late) >= 3

        run = await up.wait_state(run_id, after_the_late_one, timeout=60, what="fires go on")
        seen = fires(run, "a")
        dues = [f["due_at"] for f in seen]
        assert dues == sorted(set(dues)), "a due time fired twice"
        late = [f for f in seen if f["fired_at"] - f["due_at"] > DOWN - 1]
        assert len(late) == 1, seen  # the missed intervals: one fire, late
        (missed,) = late
        following = seen[seen.index(missed) + 1]
        # The intervals missed are not delivered one by one: the next fire is
        # the first one of the schedule's grid after the late fire.
        assert following["due_at"] > missed["fired_at"]
        assert following["due_at"] - missed["due_at"] >= DOWN
        phase = [(d - a["next_due"]) % 1.0 for d in dues]
        assert all(p < 1e-6 or p > 1 - 1e-6 for p in phase), phase
        for f in seen[seen.index(missed) + 1 :]:
            assert f["fired_at"] - f["due_at"] < DOWN - 1, f

        # Counted since the new hub's boot: the late fire and those after it.
        metrics = (await up.http.get("/metrics")).text
        counted = {
            line.split()[0]: float(line.split()[1])
            for line in metrics.splitlines()
            if line.startswith("mailrun_schedule_fires")
        }
        assert counted["mailrun_schedule_fires_total"] >= 3, counted
        assert counted["mailrun_schedule_fires_rejected_total"] == 0, counted

        # Removed: its fires stop; the other schedule's go on.
        code, out = await mailrun(up, "schedule", "remove", "ticker", a["id"])
        assert code == 0 and a["id"] in out, out
        removed_at = time.time()

        def stored(subject: str) -> int:
            rows = up.query(
                "SELECT COUNT(*) FROM workflow_run_dispatch WHERE kind = 'schedule'"
                " AND subject = ?",
                subject,
            )
            return int(rows[0][0])

        fired_a = stored("a")

        def two_more_b(r: Any) -> bool:
            return len([f for f in fires(r, "b") if f["due_at"] > removed_at + 1]) >= 2

        run = await up.wait_state(run_id, two_more_b, timeout=60, what="b fires on")
        assert stored("a") == fired_a == len(fires(run, "a"))
        b_dues = [f["due_at"] for f in fires(run, "b")]
        assert b_dues == sorted(set(b_dues))

        code, out = await mailrun(up, "schedule", "list", "ticker")
        assert code == 0 and a["id"] not in out and b["id"] in out, out
        code, out = await mailrun(up, "schedule", "remove", "ticker", a["id"])
        assert code == 1 and "unknown_schedule" in out, out
