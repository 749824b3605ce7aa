"""`mailrun up --nats URL` against an external nats-server that requires
credentials: its operator installs what `mailrun nats-config` prints and
reloads the server after a deploy; until then the new sidecar waits."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.harness import MAILRUN, mailrun_up, recorder_source
from tests.support import NatsServerProcess
from tests.support.servers.identities import refusal

pytestmark = pytest.mark.anyio


def nats_config(state_dir: Path) -> str:
    done = subprocess.run(
        [MAILRUN, "nats-config", "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout


async def test_an_external_server_with_the_printed_config_serves_every_identity(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    config = tmp_path / "nats" / "authorization.conf"
    config.parent.mkdir()
    config.write_text(nats_config(state))  # before the hub's first start: the hub alone
    server = NatsServerProcess(config_file=config, log_file=tmp_path / "nats.log")
    async with server, mailrun_up(tmp_path, "--nats", server.url) as up:
        assert "Authorization Violation" in await refusal(server.url, None)
        dep = await up.deploy("outside", recorder_source())
        receipt = (await up.send(dep["address"], "one")).json()
        assert dep["id"] not in config.read_text()  # not admitted yet: its sidecar waits
        config.write_text(nats_config(state))
        assert dep["id"] in config.read_text()
        server.reload()
        run = await up.wait_state(receipt["run_id"], lambda r: r["state"].get("count") == 1)
        assert run["state"]["seen"][0]["subject"] == "one"
