"""A hub process alone (``python -m hub``, no ``mailrun up``), as the tests
that prove what a real hub process does start it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ..http import HubClient
from ..repo import REPO
from .ports import free_port
from .starts import HUB_START_TIMEOUT, started

STOP_WITHIN = 8.0
"""Seconds a hub may take to exit 0 on SIGTERM."""


@dataclass(frozen=True)
class LoneHub:
    """A hub process's client, its first ``/healthz`` and its log."""

    client: HubClient
    health: dict[str, Any]
    log: Path
    token_file: Path


@asynccontextmanager
async def lone_hub(
    tmp_path: Path, nats_url: str, *options: str, env: Mapping[str, str] | None = None
) -> AsyncIterator[LoneHub]:
    """``python -m hub`` on a free loopback port with ``options`` (``env``
    added to its environment), its state and log in ``tmp_path``; the block
    runs once its ``/healthz`` answers, and its end stops the hub with
    SIGTERM, which it must obey with exit status 0 within ``STOP_WITHIN``."""
    port = free_port()
    argv = [sys.executable, "-m", "hub", "--state-dir", str(tmp_path / "state"),
            "--http", f"127.0.0.1:{port}", "--nats", nats_url, *options]  # fmt: skip
    log_path = tmp_path / "hub.log"
    token_file = tmp_path / "state" / "admin-token"
    with log_path.open("wb") as log:
        proc = await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        )
        async with proc:
            try:
                async with aclosing(
                    HubClient(f"http://127.0.0.1:{port}", token_file=token_file)
                ) as client:
                    health = await started(
                        client.healthz, exit_code=lambda: proc.returncode, logs=[log_path],
                        timeout=HUB_START_TIMEOUT, what="the hub's /healthz",
                    )  # fmt: skip
                    yield LoneHub(client, health, log_path, token_file)
                proc.send_signal(signal.SIGTERM)
                with anyio.fail_after(STOP_WITHIN):
                    code = await proc.wait()
                assert code == 0, log_path.read_text()
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
