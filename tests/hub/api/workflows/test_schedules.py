"""``/workflows/deployments/{key}/schedules``: a deployment's schedules added,
listed and removed. Every schedule that cannot fire, every subject and
payload refused, is 422 ``invalid_schedule`` with the reason and leaves
nothing stored; an unknown deployment or schedule is 404; a deleted
deployment's schedules go with it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime import is_id

from ..harness import Api, api, assert_error

pytestmark = pytest.mark.anyio

PATH = "/workflows/deployments/flow/schedules"
JSON = {"content-type": "application/json"}


async def stored(hub: Api) -> int:
    return await hub.count("SELECT COUNT(*) FROM schedule")


async def test_a_schedule_is_added_listed_and_removed(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        dep = await hub.deploy("flow")
        before = time.time()
        r = await hub.client.post(PATH, json={"every": 60, "subject": "tick", "payload": [1, "a"]})
        assert r.status_code == 201, r.text
        every = r.json()
        assert set(every) == {
            "id", "deployment_id", "every", "cron", "tz", "subject", "payload", "next_due",
            "created_at",
        }  # fmt: skip
        assert is_id(every["id"], "sch") and every["deployment_id"] == dep["id"]
        assert (every["every"], every["cron"], every["tz"]) == (60, None, "UTC")
        assert every["subject"] == "tick" and every["payload"] == [1, "a"]
        assert every["next_due"] == every["created_at"] + 60 and every["created_at"] >= before

        cron = {"cron": "0 9 * * 1-5", "tz": "Europe/Paris"}
        r = await hub.client.post(f"/workflows/deployments/{dep['id']}/schedules", json=cron)
        assert r.status_code == 201, r.text
        weekdays = r.json()
        assert weekdays["cron"] == "0 9 * * 1-5" and weekdays["tz"] == "Europe/Paris"
        assert weekdays["every"] is None and weekdays["payload"] is None
        assert weekdays["subject"] == "" and weekdays["next_due"] > before

        listed = (await hub.client.get(PATH)).json()["schedules"]
        assert listed == [every, weekdays]

        r = await hub.client.delete(f"{PATH}/{every['id']}")
        assert r.status_code == 200 and r.json() == every
        assert (await hub.client.get(PATH)).json()["schedules"] == [weekdays]
        assert await stored(hub) == 1
        assert_error(await hub.client.delete(f"{PATH}/{every['id']}"), 404, "unknown_schedule")


BAD_SCHEDULES: list[tuple[Any, str]] = [
    ({}, "one of every"),
    ({"every": 5, "cron": "* * * * *"}, "one of every"),
    ({"every": 0.5}, "every must be a finite number >= 1"),
    ({"every": 0}, "every must be a finite number >= 1"),
    ({"every": -60}, "every must be a finite number >= 1"),
    ({"every": "60"}, "Expected `float | null`"),
    ({"every": True}, "Expected `float | null`"),
    ({"cron": "every monday"}, "does not parse"),
    ({"cron": "61 * * * *"}, "does not parse"),
    ({"cron": "0 0 30 2 *"}, "does not parse"),
    ({"cron": "0 9 * * *", "tz": "Europe/Atlantis"}, "unknown time zone"),
    ({"cron": "0 9 * * *", "tz": ""}, "unknown time zone"),
    ({"every": 60, "tz": "Europe/Paris"}, "tz goes with cron"),
    ({"tz": "Europe/Paris"}, "one of every"),
    ({"every": 60, "subject": "x" * 999}, "'subject' must be at most 998"),
    ({"every": 60, "subject": "a\r\nBcc: x@y.z"}, "'subject' must be at most 998"),
    ({"every": 60, "payload": "x" * (64 * 1024)}, "'payload' is 65538 bytes"),
    ({"every": 60, "evry": 5}, "unknown field `evry`"),
    ([60], "Expected `object`"),
]


@pytest.mark.parametrize(("body", "detail"), BAD_SCHEDULES)
async def test_a_schedule_that_cannot_be_kept_is_refused_and_nothing_stored(
    tmp_path: Path, body: Any, detail: str
) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("flow")
        r = await hub.client.post(PATH, json=body)
        assert_error(r, 422, "invalid_schedule")
        assert detail in r.json()["detail"], r.json()
        assert await stored(hub) == 0


async def test_a_payload_at_the_limit_is_kept(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("flow")
        payload = "x" * (64 * 1024 - 2)  # with its quotes: 64 KiB of JSON exactly
        r = await hub.client.post(PATH, json={"every": 60, "payload": payload})
        assert r.status_code == 201, r.text
        assert r.json()["payload"] == payload


async def test_a_body_that_is_not_json_is_malformed(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("flow")
        body = b'{"every": 60, "payload": nope}'
        r = await hub.client.post(PATH, content=body, headers=JSON)
        assert_error(r, 400, "malformed_json")
        assert await stored(hub) == 0


async def test_unknown_deployments_and_schedules_are_404(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("flow")
        other = await hub.deploy("other")
        nowhere = "/workflows/deployments/nobody/schedules"
        assert_error(await hub.client.post(nowhere, json={"every": 60}), 404, "unknown_deployment")
        assert_error(await hub.client.get(nowhere), 404, "unknown_deployment")
        assert_error(await hub.client.delete(f"{nowhere}/sch_x"), 404, "unknown_deployment")
        assert_error(await hub.client.delete(f"{PATH}/sch_nothing"), 404, "unknown_schedule")
        # A schedule is removed through its own deployment only.
        r = await hub.client.post(PATH, json={"every": 60})
        theirs = f"/workflows/deployments/{other['id']}/schedules/{r.json()['id']}"
        assert_error(await hub.client.delete(theirs), 404, "unknown_schedule")
        assert await stored(hub) == 1


async def test_a_deleted_deployment_takes_no_schedule_and_loses_its_own(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("flow")
        kept = await hub.deploy("kept")
        for path in (PATH, f"/workflows/deployments/{kept['id']}/schedules"):
            assert (await hub.client.post(path, json={"every": 60})).status_code == 201
        assert (await hub.client.delete("/workflows/deployments/flow")).status_code == 200
        assert await stored(hub) == 1
        assert await hub.count("SELECT COUNT(*) FROM schedule WHERE deployment_id = ?", kept["id"])
        # The name resolves to the deleted deployment, which takes nothing more.
        assert_error(await hub.client.post(PATH, json={"every": 60}), 409, "deployment_not_live")
        assert (await hub.client.get(PATH)).json() == {"schedules": []}
        assert await stored(hub) == 1


async def test_schedules_are_for_the_admin_only(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("flow")
        calls: list[httpx.Response] = [
            await hub.anonymous.post(PATH, json={"every": 60}),
            await hub.anonymous.get(PATH),
            await hub.anonymous.delete(f"{PATH}/sch_x"),
        ]
        for r in calls:
            assert_error(r, 401, "unauthorized")
        assert await stored(hub) == 0
