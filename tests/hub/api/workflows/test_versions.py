"""The versions routes over HTTP (no sidecar here: a rollout stays asked for)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..harness import SOURCE, api, assert_error

pytestmark = pytest.mark.anyio


async def test_a_version_is_listed_and_waits_for_a_sidecar_to_load_it(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        dep = await hub.deploy("flow")
        url = "/workflows/deployments/flow/versions"
        r = await hub.client.post(f"{url}?wait=0", json={"source": SOURCE + "# 2\n"})
        assert r.status_code == 202, r.text
        assert (r.json()["version"], r.json()["status"], r.json()["active"]) == (
            2,
            "loading",
            False,
        )
        listing = (await hub.client.get(url)).json()["versions"]
        assert [(v["version"], v["status"], v["active"]) for v in listing] == [
            (1, "ready", True),
            (2, "loading", False),
        ]
        view = (await hub.client.get(f"/workflows/deployments/{dep['id']}")).json()
        assert (view["version"], view["rollout_version"]) == (1, 2)
        # Asking for the active version calls the rollout off.
        r = await hub.client.post(f"{url}/1/activate")
        assert r.status_code == 200 and r.json()["active"] is True
        view = (await hub.client.get(f"/workflows/deployments/{dep['id']}")).json()
        assert (view["version"], view["rollout_version"]) == (1, None)


async def test_bad_version_requests_get_typed_errors(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("flow")
        url = "/workflows/deployments/flow/versions"
        assert_error(await hub.client.post(f"{url}/9/activate"), 404, "unknown_version")
        assert_error(await hub.client.post(f"{url}/x/activate"), 422, "invalid_request")
        bad = await hub.client.post(url, json={"source": SOURCE, "entrypoint": "no colon"})
        assert_error(bad, 422, "invalid_deployment")
        assert_error(await hub.client.post(f"{url}?wait=x", json={}), 422, "invalid_request")
        missing = "/workflows/deployments/nothing/versions"
        assert_error(
            await hub.client.post(missing, json={"source": SOURCE}), 404, "unknown_deployment"
        )
        await hub.client.delete("/workflows/deployments/flow")
        gone = await hub.client.post(f"{url}?wait=0", json={"source": SOURCE})
        assert_error(gone, 409, "deployment_not_live")
        assert await hub.count("SELECT COUNT(*) FROM deployment_version") == 1
