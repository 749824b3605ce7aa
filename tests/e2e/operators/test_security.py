"""Nobody acts without the admin token: a real `mailrun up`, real HTTP, the
real `mailrun` CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import anyio
import httpx
import psutil
import pytest

from tests.support import free_port, wait_for

from ..harness import MAILRUN, UP_START_TIMEOUT, Up, mailrun_up, recorder_source, wait_started

pytestmark = pytest.mark.anyio

# Every route of docs/design.md section 8 this release serves, but /healthz.
GUARDED = [
    ("GET", "/"),
    ("POST", "/mail"),
    ("POST", "/workflows/deployments"),
    ("GET", "/workflows/deployments"),
    ("GET", "/workflows/deployments/{dep}"),
    ("DELETE", "/workflows/deployments/{dep}"),
    ("GET", "/runs"),
    ("GET", "/runs/{run}"),
    ("GET", "/dispatches/{dispatch}"),
    ("POST", "/approvals/apr_1"),
    ("GET", "/metrics"),
]
EVIL = {"name": "evil", "source": "import os\nasync def main(ctx, item):\n    os.system('id')\n"}


def unauthorized(r: httpx.Response) -> None:
    assert r.status_code == 401, r.text
    assert r.json()["status"] == "error" and r.json()["reason"] == "unauthorized"


async def test_without_the_token_nothing_is_read_or_changed(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("victim", recorder_source())
        receipt = (await up.send(dep["address"], "one")).json()
        ids = {"dep": dep["id"], "run": receipt["run_id"], "dispatch": receipt["dispatch_id"]}
        async with httpx.AsyncClient(base_url=up.url, timeout=10) as anonymous:
            assert (await anonymous.get("/healthz")).json() == {"status": "ok"}
            for method, path in GUARDED:
                body = {"to": dep["address"], "subject": "forged"} if method == "POST" else None
                unauthorized(await anonymous.request(method, path.format(**ids), json=body))
            # What a web page can send without a preflight, from anywhere.
            for headers in (
                {"content-type": "text/plain"},
                {"content-type": "text/plain", "origin": "http://evil.example"},
                {"content-type": "application/x-www-form-urlencoded", "origin": "null"},
            ):
                r = await anonymous.post(
                    "/workflows/deployments", content=json.dumps(EVIL), headers=headers
                )
                unauthorized(r)
            # The console's cookie from a page of another origin (another port
            # of the same host is "same site": SameSite alone would send it).
            cookie = {"cookie": f"mailrun_session={up.token}"}
            for origin in ("http://evil.example", f"http://127.0.0.1:{free_port()}"):
                headers = {**cookie, "origin": origin}
                unauthorized(await anonymous.post("/workflows/deployments", json=EVIL,
                                                  headers=headers))  # fmt: skip
                unauthorized(await anonymous.delete(f"/workflows/deployments/{dep['id']}",
                                                    headers=headers))  # fmt: skip
        assert up.query("SELECT name FROM deployment") == [("victim",)]
        assert up.query("SELECT COUNT(*) FROM workflow_run_dispatch") == [(1,)]
        assert up.query("SELECT deleted_at FROM deployment") == [(None,)]

        # With the token, everything works; the forgeries left no trace.
        second = await up.send(dep["address"], "stop")
        run = await up.wait_state(second.json()["run_id"], lambda r: r["status"] == "completed")
        assert [s["subject"] for s in run["state"]["seen"]] == ["one", "stop"]


async def test_the_printed_console_url_logs_a_browser_in(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:

        def console_url() -> list[str]:
            printed = (tmp_path / "up.log").read_text()
            return re.findall(r"mailrun up: console (\S+/\?token=\S+) ", printed)

        (url,) = await wait_for(console_url, what="up to print the console URL")
        assert url == f"{up.url}/?token={up.token}"
        async with httpx.AsyncClient(timeout=10, follow_redirects=True) as browser:
            page = await browser.get(url)
            assert page.status_code == 200 and str(page.url) == f"{up.url}/"
            assert browser.cookies["mailrun_session"] == up.token
            r = await browser.post(
                f"{up.url}/workflows/deployments",
                json={"name": "from-console", "source": recorder_source()},
                headers={"origin": up.url},
            )
            assert r.status_code == 201, r.text
            r = await browser.post(f"{up.url}/mail", json={"to": r.json()["address"]},
                                   headers={"origin": up.url})  # fmt: skip
            assert r.status_code == 202, r.text
        await up.wait_state(r.json()["run_id"], lambda run: run["state"].get("count") == 1)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MAILRUN_TOKEN", "MAILRUN_HUB")}
    return {**env, **extra}


async def mailrun(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return await anyio.run_process([MAILRUN, *args], cwd=cwd, env=env, check=False)


def _up_in(cwd: Path, http: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`mailrun up` with the default state dir, ./mailrun-state."""
    with open(cwd / "up.log", "wb") as log:
        return subprocess.Popen([MAILRUN, "up", "--http", http], cwd=cwd, stdout=log,
                                stderr=subprocess.STDOUT, env=env)  # fmt: skip


async def test_the_cli_finds_the_token_by_itself_after_up(tmp_path: Path) -> None:
    # MAILRUN_HUB only because the default port may be taken on a test machine.
    http = f"127.0.0.1:{free_port()}"
    env = _env(MAILRUN_HUB=f"http://{http}")
    proc = _up_in(tmp_path, http, env)
    try:
        token_file = tmp_path / "mailrun-state" / "admin-token"
        await wait_for(token_file.exists, timeout=UP_START_TIMEOUT, what="up to create the token")
        up = Up(tmp_path / "mailrun-state", proc, http)
        await wait_started(up)
        (tmp_path / "flow.py").write_text(recorder_source())

        done = await mailrun(tmp_path, "deploy", "flow.py", "--name", "plain", env=env)
        assert done.returncode == 0, done.stderr
        done = await mailrun(tmp_path, "send", "plain@mailrun.local", "--subject", "stop",
                             "--json", env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
        run_id = json.loads(done.stdout)["run_id"]

        # Waited for over HTTP: a CLI process a poll cost a core the whole wait.
        await up.wait_state(run_id, lambda r: r["status"] == "completed", timeout=30)
        shown = await mailrun(tmp_path, "run", run_id, "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        run = json.loads(shown.stdout)
        assert run["status"] == "completed" and run["result"] == {"count": 1}

        # Elsewhere, no token is found: the hub refuses, the CLI says why.
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        done = await mailrun(elsewhere, "deployments", env=env)
        assert done.returncode == 1
        assert done.stderr.decode().startswith("error: unauthorized: ")
        done = await mailrun(elsewhere, "deployments", env={**env, "MAILRUN_TOKEN": up.token or ""})
        assert done.returncode == 0 and b"plain" in done.stdout
        await up.aclose()
    finally:
        proc.terminate()
        await anyio.to_thread.run_sync(proc.wait)


@pytest.mark.parametrize("start", ["fork", "exec"])
async def test_only_up_and_its_hub_hold_the_hubs_listening_socket(
    tmp_path: Path, start: str
) -> None:
    # up hands its hub the port's socket. Workflow code runs in the sidecars:
    # one that held the socket too could accept the hub's clients, and read
    # their admin tokens and mail.
    async with mailrun_up(tmp_path, "--sidecar-start", start) as up:
        dep = await up.deploy("held", recorder_source())
        run_id = (await up.send(dep["address"], "one")).json()["run_id"]
        await up.wait_state(run_id, lambda r: r["state"].get("count") == 1)
        port = int(up.url.rsplit(":", 1)[1])
        family = [psutil.Process(up.proc.pid), *psutil.Process(up.proc.pid).children(True)]
        holders = {p.pid for p in family if _listens_on(p, port)}
        assert await up.sidecar_pid(dep["id"]) in {p.pid for p in family}
        assert holders == {up.proc.pid, await up.hub_pid()}


def _listens_on(process: psutil.Process, port: int) -> bool:
    try:
        found = process.net_connections("tcp")
    except psutil.NoSuchProcess:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in found)
