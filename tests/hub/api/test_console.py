"""The web console's pages over the ASGI app (the browser's view of them is
tests/e2e/operators/test_console.py): what they list, that store text is escaped,
their headers, and that they are the admin's like every route."""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import api, assert_error

pytestmark = pytest.mark.anyio

HOSTILE = "<script>alert(\"x\")</script> & 'q'"
ESCAPED = "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &#39;q&#39;"  # markupsafe's


async def test_the_pages_list_deployments_runs_and_dispatches_escaped(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        dep = await hub.deploy("shop")
        r = await hub.send(dep["address"], subject=HOSTILE, **{"from": "a@b.example"})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]

        index = await hub.client.get("/")
        assert index.status_code == 200, index.text
        assert f'href="/console/deployments/{dep["id"]}"' in index.text
        assert dep["address"] in index.text

        for key in (dep["id"], "shop"):
            page = await hub.client.get(f"/console/deployments/{key}")
            assert page.status_code == 200 and f'href="/console/runs/{run_id}"' in page.text
            assert f'data-events="/events?deployment={dep["id"]}"' in page.text

        run = await hub.client.get(f"/console/runs/{run_id}")
        assert run.status_code == 200
        assert ESCAPED in run.text and "<script>alert" not in run.text
        assert '<table class="dispatches">' in run.text and "a@b.example" in run.text
        assert ">None<" not in run.text  # a missing value (the run's error) shows as nothing

        assert_error(await hub.client.get("/console/runs/run_nope"), 404, "unknown_run")
        assert_error(await hub.client.get("/console/deployments/nope"), 404, "unknown_deployment")


async def test_the_pages_allow_only_the_hubs_own_script_and_styles(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        page = await hub.client.get("/")
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["referrer-policy"] == "no-referrer"
        assert page.headers["cache-control"] == "no-store"
        assert 'name="viewport"' in page.text and '<script src="/console.js"' in page.text
        assert "<style" not in page.text and " style=" not in page.text

        js = await hub.client.get("/console.js")
        assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
        assert "EventSource" in js.text
        css = await hub.client.get("/console.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        assert (await hub.client.get("/favicon.ico")).status_code == 204


async def test_the_console_is_the_admins(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        dep = await hub.deploy("shop")
        for path in ("/", "/console.js", "/console.css", f"/console/deployments/{dep['id']}"):
            assert_error(await hub.anonymous.get(path), 401, "unauthorized")
