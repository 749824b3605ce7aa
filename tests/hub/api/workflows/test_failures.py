"""Failure policies over HTTP: a deployment's policy set at create and
changed by PATCH (refused whole when a value is not one), a suspended run
resumed once, a parked dispatch listed and retried once, a new version
resuming what was suspended, and health and metrics telling of both."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from hub.store import Tx, add_version, finish_rollout, suspend_run
from hub.wire.events.ingest import Ingest
from hub.wire.retention import DeadLetters
from runtime import DispatchProcessed, Sources, new_id
from tests.hub.api.harness import Api, api
from tests.support.store import read_all, statement

pytestmark = pytest.mark.anyio

DEFAULTS = {"on_failure": "suspend", "max_attempts": 5, "max_backoff": 60.0,
            "handler_timeout": 300.0}  # fmt: skip


def policy(view: dict[str, Any]) -> dict[str, Any]:
    return {k: view[k] for k in DEFAULTS}


async def mails(a: Api, dep: dict[str, Any], n: int) -> list[dict[str, Any]]:
    receipts = []
    for i in range(n):
        r = await a.send(dep["address"], text=f"m{i}")
        assert r.status_code == 202, r.text
        receipts.append(r.json())
    return receipts


async def suspended(a: Api, receipt: dict[str, Any], error: str = "RuntimeError: boom") -> None:
    """The run of ``receipt`` suspended on its dispatch, as a RunSuspended applies it."""
    await a.store.transact(
        lambda tx: suspend_run(
            tx, receipt["run_id"], receipt["dispatch_id"], error, time.time(), time.time()
        )
    )


async def parked(a: Api, receipt: dict[str, Any], error: str = "ValueError: bad") -> None:
    """``receipt``'s dispatch parked, as the hub applies the sidecar's report."""
    event = DispatchProcessed(
        event_id=new_id("evt"),
        run_id=receipt["run_id"],
        dispatch_id=receipt["dispatch_id"],
        seq=receipt["seq"],
        outcome="parked",
        error=error,
        step=receipt["seq"],
    )

    def body(tx: Tx) -> None:
        Ingest(tx, receipt["deployment_id"], "events", time.time(), DeadLetters()).events([event])

    await a.store.transact(body)


async def test_a_deployment_has_the_default_policy_or_the_one_it_was_created_with(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as a:
        plain = await a.deploy("plain")
        assert policy(plain) == DEFAULTS
        given = await a.deploy(
            "given", source="async def main(ctx, item): pass\n", on_failure="park",
            max_attempts=2, handler_timeout=0.5,
        )  # fmt: skip
        assert policy(given) == {**DEFAULTS, "on_failure": "park", "max_attempts": 2,
                                 "handler_timeout": 0.5}  # fmt: skip
        listed = (await a.client.get("/workflows/deployments")).json()["deployments"]
        assert [policy(d)["on_failure"] for d in listed] == ["suspend", "park"]
        r = await a.client.post(
            "/workflows/deployments",
            json={"name": "bad", "source": "x = 1\n", "on_failure": "retry"},
        )
        assert (r.status_code, r.json()["reason"]) == (422, "invalid_policy")
        assert "on_failure" in r.json()["detail"]
        assert await a.count("SELECT COUNT(*) FROM deployment WHERE name = 'bad'") == 0


async def test_patch_changes_any_subset_and_refuses_a_bad_value_whole(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow")
        r = await a.client.patch("/workflows/deployments/flow", json={"on_failure": "park"})
        assert r.status_code == 200, r.text
        assert policy(r.json()) == {**DEFAULTS, "on_failure": "park"}
        r = await a.client.patch(
            f"/workflows/deployments/{dep['id']}", json={"max_attempts": 9, "max_backoff": 0}
        )
        assert policy(r.json()) == {**DEFAULTS, "on_failure": "park", "max_attempts": 9,
                                    "max_backoff": 0.0}  # fmt: skip
        before = policy(r.json())
        for bad, named in (
            ({"on_failure": "ignore", "max_attempts": 3}, "on_failure"),
            ({"max_attempts": 0}, "max_attempts"),
            ({"max_attempts": 101}, "max_attempts"),
            ({"max_backoff": 86401}, "max_backoff"),
            ({"handler_timeout": 0.05, "on_failure": "fail"}, "handler_timeout"),
            ({"max_attempts": "5"}, "max_attempts"),
            ({"max_attempt": 3}, "max_attempt"),
        ):
            r = await a.client.patch("/workflows/deployments/flow", json=bad)
            assert (r.status_code, r.json()["reason"]) == (422, "invalid_policy"), bad
            assert named in r.json()["detail"], r.json()
        shown = (await a.client.get("/workflows/deployments/flow")).json()
        assert policy(shown) == before
        r = await a.client.patch("/workflows/deployments/nobody", json={"max_attempts": 2})
        assert (r.status_code, r.json()["reason"]) == (404, "unknown_deployment")
        assert (await a.client.delete("/workflows/deployments/flow")).status_code == 200
        r = await a.client.patch("/workflows/deployments/flow", json={"max_attempts": 2})
        assert (r.status_code, r.json()["reason"]) == (409, "deployment_not_live")


async def test_a_suspended_run_is_shown_and_resumed_once(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow")
        first, second = await mails(a, dep, 2)
        run_id = first["run_id"]
        r = await a.client.post(f"/runs/{run_id}/resume")
        assert (r.status_code, r.json()["reason"]) == (409, "run_not_suspended")
        await suspended(a, first)
        run = (await a.client.get(f"/runs/{run_id}")).json()
        assert (run["status"], run["failing_dispatch_id"], run["error"]) == (
            "suspended", first["dispatch_id"], "RuntimeError: boom",
        )  # fmt: skip
        assert run["suspended_at"] is not None
        # Still live: mail to it is accepted (and held by its sidecar).
        (third,) = await mails(a, dep, 1)
        assert third["run_id"] == run_id
        # A new version is active (its rollout did not go through the
        # sidecar here): the open dispatches are re-stamped with it.
        await a.store.transact(lambda tx: tx.execute(statement(_ACTIVATE), (dep["id"],)))

        r = await a.client.post(f"/runs/{run_id}/resume")
        assert r.status_code == 200, r.text
        run = r.json()
        assert (run["status"], run["suspended_at"], run["failing_dispatch_id"], run["error"]) == (
            "running", None, None, None,
        )  # fmt: skip
        rows = await _dispatches(a, run_id)
        assert [(kind, seq, status, version) for _, kind, seq, status, version in rows] == [
            ("mail", 1, "reserved", 2), ("mail", 2, "reserved", 2), ("mail", 3, "reserved", 2),
            ("resume", 4, "reserved", 2),
        ]  # fmt: skip
        assert (await a.client.get(f"/workflows/deployments/{dep['id']}")).json()["next_seq"] == 5
        r = await a.client.post(f"/runs/{run_id}/resume")
        assert (r.status_code, r.json()["reason"]) == (409, "run_not_suspended")
        assert len(await _dispatches(a, run_id)) == 4
        r = await a.client.post("/runs/run_nobody/resume")
        assert (r.status_code, r.json()["reason"]) == (404, "unknown_run")
        del second


# What a finished rollout to version 2 leaves, without the resume (a test's shortcut).
_ACTIVATE = "UPDATE deployment SET version = 2 WHERE id = ?"


async def _dispatches(a: Api, run_id: str) -> list[Any]:
    return list(
        await read_all(
            a.store,
            "SELECT id, kind, seq, status, version FROM workflow_run_dispatch"
            " WHERE run_id = ? ORDER BY seq",
            run_id,
        )
    )


async def test_a_version_made_active_resumes_every_suspended_run(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow")
        (first,) = await mails(a, dep, 1)
        await suspended(a, first)
        v2 = Sources(entrypoint="flow:main", files={"flow.py": "async def main(c, i): pass\n"})
        version = await a.store.transact(partial(add_version, deployment_id=dep["id"], sources=v2))
        # Refused: nothing resumes.
        await a.store.transact(
            partial(finish_rollout, deployment_id=dep["id"], version=version, error="nope")
        )
        assert (await a.client.get(f"/runs/{first['run_id']}")).json()["status"] == "suspended"
        await a.store.transact(partial(add_version, deployment_id=dep["id"], sources=v2))
        assert await a.store.transact(
            partial(finish_rollout, deployment_id=dep["id"], version=version + 1, error=None)
        )
        run = (await a.client.get(f"/runs/{first['run_id']}")).json()
        assert (run["status"], run["failing_dispatch_id"]) == ("running", None)
        rows = await _dispatches(a, first["run_id"])
        assert [(kind, version) for _, kind, _, _, version in rows] == [
            ("mail", 3), ("resume", 3),
        ]  # fmt: skip


async def test_a_parked_dispatch_is_listed_and_retried_once(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow", source="async def main(ctx, item): pass\n",
                             on_failure="park")  # fmt: skip
        other = await a.deploy("other")
        first, second = await mails(a, dep, 2)
        (elsewhere,) = await mails(a, other, 1)
        r = await a.client.post(f"/dispatches/{first['dispatch_id']}/retry")
        assert (r.status_code, r.json()["reason"]) == (409, "dispatch_not_parked")
        await parked(a, first)
        await parked(a, elsewhere, "KeyError: 'x'")
        shown = (await a.client.get(f"/dispatches/{first['dispatch_id']}")).json()
        assert (shown["status"], shown["error"]) == ("parked", "ValueError: bad")
        listed = (await a.client.get("/dispatches?status=parked")).json()["dispatches"]
        assert [d["id"] for d in listed] == [elsewhere["dispatch_id"], first["dispatch_id"]]
        listed = (await a.client.get("/dispatches?deployment=flow")).json()["dispatches"]
        assert [(d["id"], d["error"]) for d in listed] == [
            (first["dispatch_id"], "ValueError: bad")
        ]
        assert len((await a.client.get("/dispatches?limit=1")).json()["dispatches"]) == 1
        r = await a.client.get("/dispatches?status=processed")
        assert (r.status_code, r.json()["reason"]) == (422, "invalid_request")
        # Parked is settled for the run's order, not processed: its run went on.
        run = (await a.client.get(f"/runs/{first['run_id']}")).json()
        assert (run["status"], run["last_seq"]) == ("running", 1)

        r = await a.client.post(f"/dispatches/{first['dispatch_id']}/retry")
        assert r.status_code == 202, r.text
        retried = r.json()
        assert (retried["id"], retried["seq"], retried["status"], retried["error"]) == (
            first["dispatch_id"], 3, "reserved", None,
        )  # fmt: skip
        assert retried["processed_at"] is None
        assert (await a.client.get("/workflows/deployments/flow")).json()["next_seq"] == 4
        r = await a.client.post(f"/dispatches/{first['dispatch_id']}/retry")
        assert (r.status_code, r.json()["reason"]) == (409, "dispatch_not_parked")
        # The next mail takes the seq after it: no two dispatches share one.
        (third,) = await mails(a, dep, 1)
        assert third["seq"] == 4
        listed = (await a.client.get("/dispatches?deployment=flow")).json()["dispatches"]
        assert listed == []
        r = await a.client.post("/dispatches/dsp_nobody/retry")
        assert (r.status_code, r.json()["reason"]) == (404, "unknown_dispatch")
        del second


async def test_health_is_degraded_and_metrics_count_while_runs_are_suspended_or_parked(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow")
        first, second = await mails(a, dep, 2)
        health = (await a.client.get("/healthz")).json()
        assert (health["status"], health["suspended_runs"], health["parked_dispatches"]) == (
            "ok", 0, 0,
        )  # fmt: skip
        await suspended(a, first)
        await parked(a, second)
        health = (await a.client.get("/healthz")).json()
        assert (health["status"], health["suspended_runs"], health["parked_dispatches"]) == (
            "degraded", 1, 1,
        )  # fmt: skip
        assert (await a.anonymous.get("/healthz")).json() == {"status": "degraded"}
        text = (await a.client.get("/metrics")).text
        assert f'mailrun_runs_suspended{{deployment="{dep["id"]}"}} 1' in text
        assert f'mailrun_dispatches_parked{{deployment="{dep["id"]}"}} 1' in text
        assert 'mailrun_dispatches{status="parked"} 1' in text


async def test_the_console_shows_a_suspension_and_a_parked_item_with_their_buttons(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow")
        first, second = await mails(a, dep, 2)
        page = (await a.client.get("/console/deployments/flow")).text
        assert "suspend after 5 attempts" in page
        page = (await a.client.get(f"/console/runs/{first['run_id']}")).text
        assert "/resume" not in page and "/retry" not in page
        await suspended(a, first, "RuntimeError: &lt;boom>")
        await parked(a, second, "ValueError: <bad>")
        page = (await a.client.get(f"/console/runs/{first['run_id']}")).text
        assert f'data-post="/runs/{first["run_id"]}/resume"' in page
        assert first["dispatch_id"] in page and "RuntimeError: &amp;lt;boom&gt;" in page
        assert f'data-post="/dispatches/{second["dispatch_id"]}/retry"' in page
        assert "ValueError: &lt;bad&gt;" in page
