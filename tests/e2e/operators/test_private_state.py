"""Private state, secrets kept out of sight, and contained sidecars, through real
processes: `mailrun up` on a nats-server that wants a password."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest

from runtime import NATS_URL_ENV, record_path
from runtime.sidecar_contract import (
    DEFAULT_SIDECAR_MAX_FILES,
    DEFAULT_SIDECAR_MAX_MEMORY,
    decode_restore_record,
)
from runtime.wire import unb64url
from tests.support import NatsServerProcess, wait_for

from ..harness import Up, mailrun_up

pytestmark = pytest.mark.anyio

# What the user's code sees of its process.
INSPECTOR = """
import os
import resource


async def main(ctx, item):
    with open("/proc/self/environ", "rb") as f:
        raw = [e.split(b"=", 1)[0].decode() for e in f.read().split(b"\\0") if e]
    ctx.state.update(
        env=sorted(os.environ),
        proc_env=sorted(raw),
        cwd=os.getcwd(),
        home=os.environ.get("HOME"),
        nofile=list(resource.getrlimit(resource.RLIMIT_NOFILE)),
        address_space=list(resource.getrlimit(resource.RLIMIT_AS)),
        count=ctx.state.get("count", 0) + 1,
    )
"""

OPERATOR_SECRET = "MAILRUN_TEST_OPERATOR_SECRET"


class PasswordNats(NatsServerProcess):
    """A nats-server that refuses clients without its user and password."""

    def __init__(self, password: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.password = password

    @property
    def argv(self) -> list[str]:
        return [*super().argv, "--user", "mailrun", "--pass", self.password]

    @property
    def secret_url(self) -> str:
        return f"nats://mailrun:{self.password}@{self.host}:{self.port}"


def processes(up: Up) -> list[psutil.Process]:
    root = psutil.Process(up.proc.pid)
    return [root, *root.children(recursive=True)]


def walk_private(root: Path, secret: bytes) -> list[Path]:
    """Every regular file under ``root``, each checked: neither it nor any
    directory is open to group or others, and none holds ``secret``."""
    found = []
    for parent, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            path = Path(parent, name)
            st = path.lstat()
            assert stat.S_IMODE(st.st_mode) & 0o077 == 0, f"{path}: {oct(st.st_mode)}"
            if stat.S_ISREG(st.st_mode):
                found.append(path)
                assert secret not in path.read_bytes(), path
    return found


async def processed(up: Up, dep: dict[str, Any], count: int) -> dict[str, Any]:
    r = await up.send(dep["address"], f"mail {count}")
    assert r.status_code == 202, r.text
    run: dict[str, Any] = await up.wait_state(
        r.json()["run_id"], lambda run: run["state"].get("count") == count, timeout=30
    )
    return run


async def test_a_busy_run_keeps_state_private_secrets_hidden_and_sidecars_contained(
    tmp_path: Path,
) -> None:
    password = "pw-" + secrets.token_hex(12)
    secret = "op-" + secrets.token_hex(12)
    nats = PasswordNats(password, log_file=tmp_path / "nats-server.log")
    with nats:
        # The operator gives up the URL in its environment (never on a command
        # line), and has a secret of its own there that no workflow may see.
        env = {NATS_URL_ENV: nats.secret_url, OPERATOR_SECRET: secret}
        async with mailrun_up(tmp_path, env=env) as up:
            keep = await up.deploy("keep", INSPECTOR)
            gone = await up.deploy("gone", INSPECTOR)
            for i in range(1, 4):
                run = await processed(up, keep, i)
                await processed(up, gone, i)
            state = run["state"]
            home = up.state_dir / "sidecars" / keep["id"]

            # Containment, as the workflow sees it and as the OS does.
            assert OPERATOR_SECRET not in state["env"]
            assert OPERATOR_SECRET not in state["proc_env"]
            assert state["cwd"] == str(home) and state["home"] == str(home)
            assert state["nofile"] == [DEFAULT_SIDECAR_MAX_FILES] * 2
            assert state["address_space"] == [DEFAULT_SIDECAR_MAX_MEMORY] * 2
            sidecar = psutil.Process(await up.sidecar_pid(keep["id"]))
            assert OPERATOR_SECRET not in sidecar.environ()
            assert sidecar.cwd() == str(home)
            assert sidecar.rlimit(psutil.RLIMIT_AS) == (DEFAULT_SIDECAR_MAX_MEMORY,) * 2
            assert OPERATOR_SECRET in psutil.Process(up.proc.pid).environ()  # it was there

            # The password is nowhere to be seen: argv, /healthz, up.json, join tokens.
            for proc in processes(up):
                assert password not in " ".join(proc.cmdline()), proc.cmdline()
            health = await up.http.get("/healthz")
            assert password not in health.text
            assert health.json()["nats_url"] == f"nats://{nats.host}:{nats.port}"
            up_json = up.state_dir / "up.json"
            assert password not in up_json.read_text()
            assert stat.S_IMODE(up_json.stat().st_mode) == 0o600
            for dep in (keep, gone):
                record, _ = decode_restore_record(unb64url(dep["join_token"]))
                assert password not in msgspec.json.encode(record).decode()

            # Deleting a deployment removes its sidecar's directory and key.
            r = await up.http.delete(f"/workflows/deployments/{gone['id']}")
            assert r.status_code == 200, r.text
            gone_dir = up.state_dir / "sidecars" / gone["id"]
            await wait_for(lambda: not gone_dir.exists(), timeout=30, what="the dir removed")
            assert record_path(home, keep["id"]).is_file()
            await processed(up, keep, 4)  # the other deployment goes on

        # After the run: nothing in the state dir for group or others, and the
        # password in no file (logs included).
        found = walk_private(up.state_dir, password.encode())
        assert any(p.name == "hub.db" for p in found)
        assert any(p.name.startswith("sidecar-") and p.suffix == ".log" for p in found)
        assert password not in (tmp_path / "up.log").read_text()
        assert not (up.state_dir / "sidecars" / gone["id"]).exists()
