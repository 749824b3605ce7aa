"""``POST /runs/{id}/replay`` against a real store and a real scratch process
(``python -m sidecar.replay``): the report, and each way it is refused; the
steps a run recorded reach the scratch process, which calls none of them.
The run's history is written the way ingestion writes it (``record``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hub.api.routes.runs.scratch import replay_job, scratch_env
from hub.store import read_history
from hub.store.sql import sql
from runtime import (
    NATS_URL_ENV,
    DispatchProcessed,
    Event,
    ReplayJob,
    RunStarted,
    Sources,
    encode,
    new_id,
)
from runtime.sidecar_contract import SIDECAR_PASS_ENV
from runtime.wire import StepRecorded

from ..harness import Api, api, assert_error

pytestmark = pytest.mark.anyio

V1 = """
async def main(ctx, item):
    ctx.state.setdefault("subjects", []).append(item.subject)
"""


_RECORD = sql(
    "INSERT INTO run_event (id, run_id, deployment_id, kind, payload, at)"
    " SELECT ?, id, deployment_id, ?, ?, 1.0 FROM workflow_run WHERE id = ?"
)


async def record(hub: Api, run_id: str, *events: Event) -> None:
    rows = [(e.event_id, type(e).__name__, encode(e), run_id) for e in events]
    await hub.store.transact(lambda tx: tx.execute_many(_RECORD, rows))


async def recorded_run(hub: Api, subjects: list[str]) -> str:
    """A run of V1 that processed a mail per subject; its id."""
    await hub.deploy("flow", source=V1)
    receipts = []
    for subject in subjects:
        r = await hub.send("flow@mailrun.local", subject=subject)
        assert r.status_code == 202, r.text
        receipts.append(r.json())
    run_id = str(receipts[0]["run_id"])
    events: list[Event] = [RunStarted(event_id=new_id("evt"), run_id=run_id)]
    for step, receipt in enumerate(receipts, start=1):
        state = {"subjects": subjects[:step]}
        events.append(
            DispatchProcessed(
                event_id=new_id("evt"),
                run_id=run_id,
                dispatch_id=receipt["dispatch_id"],
                seq=receipt["seq"],
                step=step,
                state=state,
            )
        )
    await record(hub, run_id, *events)
    return run_id


async def replay(hub: Api, run_id: str, **body: Any) -> Any:
    return await hub.client.post(f"/runs/{run_id}/replay", json=body, timeout=120)


@pytest.mark.slow  # real scratch processes (python -m sidecar.replay)
async def test_a_replay_reports_no_difference_or_the_first_one(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        run_id = await recorded_run(hub, ["s1", "s2", "s3"])
        same = await replay(hub, run_id, source=V1)
        assert same.status_code == 200, same.text
        assert same.json() == {
            "run_id": run_id,
            "differs": False,
            "replayed": 3,
            "start": "beginning",
            "first_step": 1,
            "last_step": 3,
            "skipped": [],
            "difference": None,
        }
        v2 = V1 + '    if item.subject == "s2":\n        ctx.state["late"] = True\n'
        other = await replay(hub, run_id, source=v2, entrypoint="flow:main")
        assert other.status_code == 200, other.text
        report = other.json()
        assert report["differs"] is True and report["replayed"] == 2
        difference = report["difference"]
        assert (difference["step"], difference["seq"], difference["what"]) == (2, 2, "state")
        assert difference["recorded"] == {"state": {"subjects": ["s1", "s2"]}}
        assert difference["replayed"] == {"state": {"subjects": ["s1", "s2"], "late": True}}


@pytest.mark.slow  # real scratch processes (python -m sidecar.replay)
async def test_a_replay_is_refused_for_a_run_code_or_history_it_cannot_use(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as hub:
        run_id = await recorded_run(hub, ["s1"])
        assert_error(await replay(hub, "run_nope", source=V1), 404, "unknown_run")
        bad = await replay(hub, run_id, source=V1, entrypoint="not an entrypoint")
        assert_error(bad, 422, "invalid_deployment")
        assert_error(await replay(hub, run_id), 422, "invalid_deployment")  # no code at all
        broken = await replay(hub, run_id, source="async def main(ctx, item)\n")
        assert_error(broken, 422, "replay_failed")
        assert "SyntaxError" in broken.json()["detail"]
        # A run that has processed nothing yet.
        await hub.deploy("idle", source=V1)
        fresh = (await hub.send("idle@mailrun.local")).json()["run_id"]
        assert_error(await replay(hub, fresh, source=V1), 409, "nothing_to_replay")


STEPS = """
from pathlib import Path


def append(word):
    with Path({log!r}).open("a") as f:
        f.write(word + "\\n")
    return word.upper()


async def main(ctx, item):
    got = [await ctx.step(name, append, name) for name in {names!r}]
    ctx.state.setdefault("got", []).append(got)
"""


@pytest.mark.slow  # real scratch processes (python -m sidecar.replay)
async def test_the_recorded_steps_reach_the_replay_which_calls_none(tmp_path: Path) -> None:
    log = tmp_path / "steps.log"
    async with api(tmp_path) as hub:
        await hub.deploy("flow", source=V1)
        receipts = [(await hub.send("flow@mailrun.local", subject=s)).json() for s in ("a", "b")]
        run_id = str(receipts[0]["run_id"])
        events: list[Event] = [RunStarted(event_id=new_id("evt"), run_id=run_id)]
        for step, receipt in enumerate(receipts, start=1):
            for index, name in enumerate(("charge", "ship"), start=1):
                events.append(
                    StepRecorded(
                        event_id=new_id("evt"),
                        run_id=run_id,
                        dispatch_id=receipt["dispatch_id"],
                        name=name,
                        index=index,
                        result=name.upper(),
                    )
                )
            events.append(
                DispatchProcessed(
                    event_id=new_id("evt"),
                    run_id=run_id,
                    dispatch_id=receipt["dispatch_id"],
                    seq=receipt["seq"],
                    step=step,
                    state={"got": [["CHARGE", "SHIP"]] * step},
                )
            )
        await record(hub, run_id, *events)

        same = await replay(
            hub, run_id, source=STEPS.format(log=str(log), names=["charge", "ship"])
        )
        assert same.status_code == 200, same.text
        assert (same.json()["differs"], same.json()["replayed"]) == (False, 2)
        renamed = STEPS.format(log=str(log), names=["charge", "deliver"])
        other = await replay(hub, run_id, source=renamed)
        assert other.status_code == 200, other.text
        difference = other.json()["difference"]
        assert (difference["step"], difference["what"]) == (1, "steps")
        assert difference["recorded"] == {"steps": ["charge", "ship"]}
        assert difference["replayed"] == {"steps": ["charge", "deliver"]}
    assert not log.exists()  # no step was called, by either replay


async def test_a_job_built_from_the_history_reads_back_whole(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        run_id = await recorded_run(hub, ["s1", "s2"])
        history = await hub.store.read(partial(read_history, run_id=run_id))
    job = replay_job(history, Sources(entrypoint="flow:main", files={"flow.py": V1}))
    read = msgspec.json.decode(msgspec.json.encode(job), type=ReplayJob)
    assert [(i.dispatch_id, i.body, i.recorded.state) for i in read.items] == [
        (i.dispatch_id, i.body, i.recorded.state) for i in history.items
    ]
    assert (read.run_id, read.deployment_id, read.entrypoint) == (
        run_id,
        history.deployment_id,
        "flow:main",
    )


def test_the_scratch_process_gets_no_secrets(tmp_path: Path) -> None:
    environ = {
        "PATH": "/usr/bin",
        NATS_URL_ENV: "nats://hub:secret@host:4222",
        SIDECAR_PASS_ENV: "API_KEY",
        "API_KEY": "k",
        "MAILRUN_TOKEN": "t",
        "AWS_SECRET_ACCESS_KEY": "s",
    }
    env = scratch_env(environ, tmp_path)
    assert env["PATH"] == "/usr/bin" and env["HOME"] == str(tmp_path)
    assert not {NATS_URL_ENV, "API_KEY", "MAILRUN_TOKEN", "AWS_SECRET_ACCESS_KEY"} & set(env)
