"""The admin token file: created once (0600) and kept; a hub that cannot read
its token does not start, on a loopback address or any other."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hub._errors import AdminTokenUnavailable
from hub._token import ensure_admin_token, read_token_file
from tests.support import REPO, free_port


def test_the_first_start_creates_it_private_and_every_later_one_keeps_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    token, created = ensure_admin_token(state)
    assert created and len(token) >= 43
    path = state / "admin-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == token + "\n"
    assert ensure_admin_token(state) == (token, False)
    assert [p.name for p in state.iterdir()] == ["admin-token"]  # no temp file left


def test_processes_starting_at_once_agree_on_one_token(tmp_path: Path) -> None:
    for round_ in range(20):
        state = tmp_path / str(round_)
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(ensure_admin_token, [state] * 4))
        assert len({token for token, _ in results}) == 1
        assert sum(created for _, created in results) == 1


@pytest.mark.parametrize(
    "content", ["", "\n", "too-short", "has a space in it, long enough", "x" * 20 + "\r\nX: y"]
)
def test_a_file_without_a_token_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(AdminTokenUnavailable, match="does not hold a token"):
        read_token_file(path)
    with pytest.raises(AdminTokenUnavailable, match="cannot read"):
        read_token_file(tmp_path / "missing")


@pytest.mark.slow  # a real hub process per address
@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1"])
def test_a_hub_without_a_token_refuses_to_start(tmp_path: Path, host: str) -> None:
    empty = tmp_path / "empty-token"
    empty.write_text("")
    port = free_port()
    argv = [sys.executable, "-m", "hub", "--state-dir", str(tmp_path / "state"),
            "--http", f"{host}:{port}", "--token-file", str(empty)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 1
    assert f"the admin token file {empty} does not hold a token" in done.stderr
    assert not (tmp_path / "state").exists()  # refused before touching anything
