"""Drive a real `mailrun up` (nats-server, hub and sidecars as OS processes)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil

from hub.natsauth import HUB_SEED_FILE
from hub.store import is_database_url
from runtime import RestoreRecord, read_restore_record, record_path
from tests.support import HubClient, command_words, descendants, free_port, wait_for
from tests.support.launch.starts import (
    HUB_RESTART_TIMEOUT,
    SIDECAR_FIRST_MAIL_TIMEOUT,
    UP_START_TIMEOUT,
    started,
)
from tests.support.servers.postgres import query

MAILRUN = str(Path(sys.executable).with_name("mailrun"))
START_ATTEMPTS = 3
"""Starts of `mailrun up` on a new port each, when another process took the last one."""

RECORDER = """
import hashlib
import os

import anyio

GATE = {gate!r}


async def main(ctx, item):
    if GATE is not None:
        while not os.path.exists(GATE):
            await anyio.sleep(0.01)
    seen = ctx.state.setdefault("seen", [])
    seen.append({{
        "dispatch_id": item.dispatch_id,
        "subject": item.subject,
        "text": item.text if len(item.body) <= 1024 else None,
        "size": len(item.body),
        "sha256": hashlib.sha256(item.body).hexdigest(),
    }})
    ctx.state["count"] = len(seen)
    if item.subject == "stop":
        ctx.complete({{"count": len(seen)}})
"""


def recorder_source(gate: Path | None = None) -> str:
    """A workflow that records every item it sees into ctx.state.

    With ``gate``, each item waits until that file exists, so a test can hold
    envelopes delivered but unprocessed.
    """
    return RECORDER.format(gate=None if gate is None else str(gate))


class Up(HubClient):
    """One `mailrun up` process with its state dir, and helpers to inspect it
    (its HTTP API: :class:`~tests.support.HubClient`)."""

    def __init__(
        self,
        state_dir: Path,
        proc: subprocess.Popen[bytes],
        http: str,
        database: str | None = None,
    ) -> None:
        super().__init__(f"http://{http}", token_file=state_dir / "admin-token")
        self.state_dir = state_dir
        self.proc = proc
        self.database = database  # a PostgreSQL URL; None: the state dir's hub.db

    async def wait_state(
        self,
        run_id: str,
        pred: Callable[[Any], bool],
        timeout: float = SIDECAR_FIRST_MAIL_TIMEOUT,
        what: str = "run state",
    ) -> Any:
        """The run once ``pred(run)`` holds; by default as long as up allows a
        sidecar's start and then some for the mail's handling: most waits here
        are a new (or restarted) sidecar's first mails."""
        return await super().wait_state(run_id, pred, timeout=timeout, what=what)

    def announced(self) -> bool:
        """Whether this up process announced its hub as ready (``up.json``
        with its pid, which up writes once its own hub answers)."""
        try:
            announcement = json.loads((self.state_dir / "up.json").read_bytes())
        except (OSError, ValueError):
            return False  # not yet, or being written
        return bool(announcement.get("pid") == self.proc.pid)

    @property
    def hub_options(self) -> list[str]:
        """The options that point a `mailrun` command at this hub, with its token."""
        return ["--hub", self.url, "--token-file", str(self.state_dir / "admin-token")]

    # --- processes ------------------------------------------------------------

    def children(self) -> list[psutil.Process]:
        """up's processes: its children, and the sidecars its fork server forked."""
        return descendants(self.proc.pid)

    def find(self, *words: str) -> psutil.Process | None:
        for child in self.children():
            try:
                argv = command_words(child)
            except psutil.Error:
                continue
            # Whole words only: a path in the argv (a test's tmp dir
            # named after the test, say) must not match "hub" or "sidecar".
            if all(w in argv for w in words):
                return child
        return None

    async def pid_of(self, *words: str, timeout: float = 20.0) -> int:
        async def probe() -> int | None:
            p = self.find(*words)
            return p.pid if p is not None else None

        return await wait_for(probe, timeout=timeout, what=f"process {words}")

    async def hub_pid(self) -> int:
        return await self.pid_of("-m", "hub")

    async def sidecar_pid(self, deployment_id: str) -> int:
        return await self.pid_of("sidecar", deployment_id)

    @property
    def hub_seed(self) -> str:
        """The hub's NATS identity: a test that speaks as the hub on the bus
        connects with it (the embedded server admits no anonymous client)."""
        return (self.state_dir / HUB_SEED_FILE).read_text().strip()

    def first_child_at(self) -> float | None:
        """When up spawned its first child (nats-server, as it starts), if it has."""
        times = []
        for child in self.children():
            with contextlib.suppress(psutil.Error):
                times.append(child.create_time())
        return min(times, default=None)

    @property
    def logs(self) -> list[Path]:
        """up's own log and its hub's."""
        return [self.state_dir.parent / "up.log", self.state_dir / "logs" / "hub.log"]

    def record_of(self, deployment_id: str) -> RestoreRecord:
        """The restore record the hub wrote for a deployment's local sidecar."""
        state = self.state_dir / "sidecars" / deployment_id
        return read_restore_record(record_path(state, deployment_id))[0]

    def hub_db(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.state_dir / 'hub.db'}?mode=ro", uri=True)

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """``sql`` (SQLite's spelling) on the hub's database, whichever it is."""
        if self.database is not None:
            return query(self.database, sql, *args)
        with self.hub_db() as db:
            return db.execute(sql, args).fetchall()


def _spawn_up(
    tmp_path: Path,
    http: str,
    *extra: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    with open(tmp_path / "up.log", "wb") as log:
        return subprocess.Popen(
            [MAILRUN, "up", "--state-dir", str(tmp_path / "state"), "--http", http, *extra],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "MAILRUN_LOG_LEVEL": "INFO", **(env or {})},
            cwd=cwd,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@asynccontextmanager
async def mailrun_up(
    tmp_path: Path,
    *extra: str,
    env: Mapping[str, str] | None = None,
    database: str | None = None,
    cwd: Path | None = None,
) -> AsyncIterator[Up]:
    """Run `mailrun up` in ``tmp_path/state`` on a free HTTP port until the block
    ends; ``env`` adds to (or overrides) the environment it inherits, ``cwd``
    is its working directory (the suite's own by default). With
    ``database`` (the ``database`` fixture's value), the hub keeps its data
    there: a PostgreSQL URL is passed as ``--database``."""
    url = database if database is not None and is_database_url(database) else None
    if url is not None:
        extra = ("--database", url, *extra)

    def spawn() -> Up:
        http = f"127.0.0.1:{free_port()}"
        proc = _spawn_up(tmp_path, http, *extra, env=env, cwd=cwd)
        return Up(tmp_path / "state", proc, http, database=url)

    up = spawn()
    try:
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                await wait_started(up)
                break
            except AssertionError:
                if attempt == START_ATTEMPTS or not _refused_its_port(tmp_path):
                    raise
            # Another process (outside this run's ports: a bench, a demo)
            # took the port between free_port and up's start; up refused it.
            await up.http.aclose()
            up = spawn()
        yield up
    except BaseException:
        _dump_logs(tmp_path)
        raise
    finally:
        await up.http.aclose()
        await anyio.to_thread.run_sync(_stop, up.proc)


def _refused_its_port(tmp_path: Path) -> bool:
    return "error: port_in_use" in (tmp_path / "up.log").read_text(errors="replace")


async def wait_started(up: Up) -> None:
    """Until ``up`` announced its hub (up.json) and the hub answers /healthz,
    as long as up itself waits for it (from its spawn of nats-server on, as
    up counts); fails at once if up exits first. A /healthz alone could be
    another process's, on a port taken before up bound it."""

    async def announced() -> dict[str, Any] | None:
        return await up.healthz() if up.announced() else None

    await started(
        announced, exit_code=up.proc.poll, logs=up.logs, timeout=UP_START_TIMEOUT,
        what="up's announcement and the hub's /healthz", since=up.first_child_at,
    )  # fmt: skip


async def restarted_hub(up: Up, boot_id: str) -> dict[str, Any]:
    """The /healthz of the hub up started after the one booted as ``boot_id``
    died: as long as up allows for its restart delay and a hub's start;
    fails at once if up exits."""

    async def new_boot() -> dict[str, Any] | None:
        health = await up.healthz()
        return health if health is not None and health["boot_id"] != boot_id else None

    return await started(
        new_boot, exit_code=up.proc.poll, logs=up.logs, timeout=HUB_RESTART_TIMEOUT,
        what="a restarted hub's /healthz",
    )  # fmt: skip


async def mailrun(up: Up, *args: str) -> tuple[int, str]:
    """Run the CLI against ``up``'s hub: its exit code and its output
    (stdout and stderr together)."""
    done = await anyio.run_process(
        [MAILRUN, *args, *up.hub_options], check=False, stderr=subprocess.STDOUT
    )
    return done.returncode, done.stdout.decode()


async def send_accepted(up: Up, address: str, subject: str) -> Any:
    """Mail ``subject`` (its message id made of it) and assert it is accepted;
    the receipt."""
    answer = await up.send(address, subject, message_id=f"<{subject}@test>")
    assert answer.status_code == 202, answer.text
    return answer.json()


async def run_status(up: Up, run_id: str, wanted: str, timeout: float = 60) -> Any:
    """The run once its status is ``wanted``."""
    return await up.wait_state(
        run_id, lambda r: r["status"] == wanted, timeout=timeout, what=f"run {wanted}"
    )


def _dump_logs(tmp_path: Path) -> None:
    """Print the tail of every process log; pytest shows it with the failure."""
    for path in sorted(tmp_path.rglob("*.log")):
        lines = path.read_text(errors="replace").splitlines()[-60:]
        print(f"----- {path.relative_to(tmp_path)} (last {len(lines)} lines)")
        print("\n".join(lines))


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
