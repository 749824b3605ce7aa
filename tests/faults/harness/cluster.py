"""nats-server, the hub and sidecars as separate OS processes, each client
behind its own :class:`~.proxy.NatsFaultProxy`, for fault tests.

Unlike ``mailrun up`` nothing restarts by itself: a test kills, restarts
and re-configures each process (its failpoints come from its own
environment) exactly when it means to. The one exception is scale to zero:
with ``idle_stop`` the sidecars fall asleep when idle, and the cluster wakes
a sidecar that exited asleep when the hub names it, as ``mailrun up`` does
(``GET /workflows/wakes``). Every process dies with the test process
(``PR_SET_PDEATHSIG``) and logs to ``<root>/logs/<name>.log``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from hub._client import AsyncHubClient
from hub._errors import HubClientError
from hub.store import DATABASE_ENV
from hub.up.processes import ChildSpec, spawn, terminate, wait_exit
from runtime import SidecarExit
from runtime.testing import FAILPOINTS_ENV
from tests.support import REPO, HubClient, NatsServerProcess, free_port, wait_for
from tests.support.launch.starts import HUB_START_TIMEOUT, SIDECAR_START_TIMEOUT, started
from tests.support.servers.postgres import query

from .proxy import NatsFaultProxy

ASLEEP_WITHIN = 20.0
"""Seconds for an idle deployment to be shown asleep with its sidecar gone:
its ``--idle-stop`` (0.5 s in the tests) and an orderly exit, with room for a
loaded machine. Apart from a fault's liveness bound, which a test may make
short on purpose."""


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != FAILPOINTS_ENV}
    path = [str(REPO), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(PYTHONUNBUFFERED="1", MAILRUN_LOG_LEVEL="INFO", PYTHONPATH=os.pathsep.join(path))
    return env


@dataclass(eq=False)
class Proc:
    """One restartable OS process; ``exit_codes`` holds those of its past runs."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    exit_codes: list[int] = field(default_factory=list)
    failpoints: str = ""
    """Those of the current (or latest) start."""
    env: dict[str, str] = field(default_factory=dict)
    """Added to the environment of every start."""

    def start(self, *, failpoints: str = "") -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is running already (pid {self.pid})")
        self._reap()
        env = {**_base_env(), **self.env}
        if failpoints:
            env[FAILPOINTS_ENV] = failpoints
        self.failpoints = failpoints
        self.popen = spawn(ChildSpec(self.name, self.argv, log_path=self.log_path, env=env))

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def asleep(self) -> bool:
        """Its last run ended asleep (a sidecar: exit code 5, its Sleep granted)."""
        if self.popen is not None:
            return self.popen.poll() == SidecarExit.ASLEEP
        return bool(self.exit_codes) and self.exit_codes[-1] == SidecarExit.ASLEEP

    def exits(self) -> list[int]:
        """The exit codes of its past runs, the one just ended included."""
        ended = [] if self.popen is None or self.running else [self.popen.returncode]
        return [*self.exit_codes, *ended]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.running:
            assert self.popen is not None
            self.popen.send_signal(sig)

    async def wait_exit(self, timeout: float = 20.0) -> int:
        """Wait until the process has exited; its exit code (negative: signal)."""
        assert self.popen is not None, f"{self.name} was never started"
        with anyio.fail_after(timeout):
            code = await wait_exit(self.popen)
        self._reap()
        return code

    async def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, SIGKILL after ``grace``; a no-op when it is not running."""
        if self.popen is not None:
            await terminate(self.popen, grace)
            self._reap()

    def _reap(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            self.exit_codes.append(self.popen.returncode)
            self.popen = None


@dataclass(eq=False)
class SidecarNode:
    deployment_id: str
    proc: Proc
    proxy: NatsFaultProxy


class Cluster(HubClient):
    """What :func:`running_cluster` yields; see the module docstring. Its hub's
    HTTP API: :class:`~tests.support.HubClient`."""

    def __init__(
        self,
        root: Path,
        nats: NatsServerProcess,
        stack: AsyncExitStack,
        env: dict[str, str] | None = None,
        sidecar_proxies: bool = True,
        database: str | None = None,
        idle_stop: float | None = None,
    ) -> None:
        super().__init__(
            f"http://127.0.0.1:{free_port()}", token_file=root / "state" / "admin-token"
        )
        self.env = dict(env or {})
        """Added to the environment of the hub and every sidecar."""
        self.sidecar_proxies = sidecar_proxies
        """False: sidecars talk to nats-server itself, and their nodes'
        proxies carry nothing (what a measurement of the sidecars wants: a
        proxy is a Python process in every message's path)."""
        self.root = root
        self.state_dir = root / "state"
        self.sidecar_root = self.state_dir / "sidecars"
        self.logs = root / "logs"
        self.nats = nats
        self.hub_proxy = NatsFaultProxy(nats.url)
        self.sidecars: dict[str, SidecarNode] = {}
        self.database = database
        """The hub's PostgreSQL database (None: hub.db in the state dir)."""
        hub_env = self.env if database is None else {**self.env, DATABASE_ENV: database}
        self.hub = Proc("hub", [], self.logs / "hub.log", env=hub_env)
        self._stack = stack
        self._moved: list[Proc] = []  # sidecars a takeover replaced
        self.idle_stop = idle_stop
        """Its sidecars' ``--idle-stop`` (None: always on)."""
        self.woken = 0
        """Sidecars started again because the hub named their deployment."""

    # --- processes ----------------------------------------------------------------

    async def start_hub(
        self, *, failpoints: str = "", wait: bool = True, direct: bool = False
    ) -> dict[str, Any] | None:
        """Start the hub behind ``hub_proxy`` (``direct``: on nats-server itself,
        out of reach of the proxy's rules); with ``wait``, return its /healthz
        once it answers as a new boot."""
        before = await self.healthz()
        self.hub.argv = [
            sys.executable, "-m", "hub", "--state-dir", str(self.state_dir),
            "--http", self.url.removeprefix("http://"),
            "--nats", self.nats.url if direct else self.hub_proxy.url,
            "--sidecar-root", str(self.sidecar_root),
        ]  # fmt: skip
        self.hub.start(failpoints=failpoints)
        if not wait:
            return None
        old = before.get("boot_id") if before is not None else None

        return await self.wait_booted(old)

    async def wait_booted(self, old: str | None, *, interval: float = 0.02) -> dict[str, Any]:
        """The /healthz of the hub just started, once it answers as a boot other
        than ``old``: as long as `mailrun up` waits for a hub; fails at once if
        the hub exits first."""
        popen = self.hub.popen
        assert popen is not None, "the hub was not started"

        async def booted() -> dict[str, Any] | None:
            health = await self.healthz()
            return health if health is not None and health.get("boot_id", old) != old else None

        return await started(
            booted, exit_code=popen.poll, logs=[self.hub.log_path], timeout=HUB_START_TIMEOUT,
            what="the new hub's /healthz", interval=interval,
        )  # fmt: skip

    @property
    def hub_behind_proxy(self) -> bool:
        return self.hub_proxy.url in self.hub.argv

    async def restart_hub(self, *, failpoints: str = "", sig: int = signal.SIGKILL) -> Any:
        """Kill the hub (SIGKILL by default), wait for it, start it again
        behind the proxy; its /healthz."""
        self.hub.kill(sig)
        if self.hub.popen is not None:
            await self.hub.wait_exit()
        return await self.start_hub(failpoints=failpoints)

    async def start_sidecar(self, deployment_id: str, *, failpoints: str = "") -> SidecarNode:
        """Start (or restart) a deployment's sidecar behind its own proxy."""
        node = await self.add_sidecar(deployment_id)
        node.proc.start(failpoints=failpoints)
        return node

    async def add_sidecar(self, deployment_id: str) -> SidecarNode:
        """The deployment's sidecar and its proxy, serving, without starting the process.

        The proxy lives in the cluster's task group: call this from the task
        that runs the cluster, before starting the sidecar from another task.
        """
        node = self.sidecars.get(deployment_id)
        if node is None:
            proxy = await self._stack.enter_async_context(NatsFaultProxy(self.nats.url))
            argv = [
                sys.executable, "-m", "sidecar",
                "--state-dir", str(self.sidecar_root / deployment_id),
                "--deployment", deployment_id,
                "--nats", proxy.url if self.sidecar_proxies else self.nats.url,
            ]  # fmt: skip
            if self.idle_stop is not None:
                argv += ["--idle-stop", str(self.idle_stop)]
            proc = Proc(
                f"sidecar-{deployment_id}",
                argv,
                self.logs / f"sidecar-{deployment_id}.log",
                env=self.env,
            )
            node = self.sidecars[deployment_id] = SidecarNode(deployment_id, proc, proxy)
        return node

    def move_sidecar(self, deployment_id: str, state_dir: Path) -> tuple[Proc, SidecarNode]:
        """Start the deployment's sidecar from ``state_dir`` (another home: a
        copy of its directory) with ``--takeover``, behind the same proxy.

        The new process becomes the deployment's node; the old one is
        returned, as it is, for the test to watch being fenced."""
        old = self.sidecars[deployment_id]
        argv = [
            sys.executable, "-m", "sidecar", "--state-dir", str(state_dir),
            "--deployment", deployment_id, "--nats", old.proxy.url, "--takeover",
        ]  # fmt: skip
        if self.idle_stop is not None:
            argv += ["--idle-stop", str(self.idle_stop)]
        name = f"sidecar-{deployment_id}-moved"
        proc = Proc(name, argv, self.logs / f"{name}.log", env=self.env)
        proc.start()
        node = self.sidecars[deployment_id] = SidecarNode(deployment_id, proc, old.proxy)
        self._moved.append(old.proc)
        return old.proc, node

    async def restart_sidecar(
        self, deployment_id: str, *, failpoints: str = "", sig: int = signal.SIGKILL
    ) -> SidecarNode:
        """Kill a deployment's sidecar (SIGKILL by default), wait for it, start it again."""
        proc = self.sidecars[deployment_id].proc
        proc.kill(sig)
        if proc.popen is not None:
            await proc.wait_exit()
        return await self.start_sidecar(deployment_id, failpoints=failpoints)

    async def wake_loop(self) -> None:
        """What ``mailrun up`` does for an asleep deployment: start its sidecar
        again when the hub names it (only one that exited asleep: a sidecar
        a test killed stays down until the test starts it)."""
        async with AsyncHubClient(self.url, timeout=2.0, token=self.token) as client:
            while True:
                try:
                    named = await client.wakes(wait=5.0)
                except HubClientError:
                    await anyio.sleep(0.1)  # the hub is down or restarting
                    continue
                for dep in named:
                    node = self.sidecars.get(dep)
                    if node is not None and not node.proc.running and node.proc.asleep:
                        node.proc.start(failpoints=node.proc.failpoints)
                        self.woken += 1
                if named:
                    await anyio.sleep(0.05)  # named until welcomed

    async def wait_asleep(self, deployment_id: str, timeout: float = ASLEEP_WITHIN) -> None:
        """Until the deployment is shown asleep and its sidecar exited asleep."""
        proc = self.sidecars[deployment_id].proc

        async def asleep() -> bool:
            r = await self.http.get(f"/workflows/deployments/{deployment_id}")
            shown = r.status_code == 200 and r.json().get("status") == "asleep"
            return shown and not proc.running and proc.asleep

        await wait_for(asleep, timeout=timeout, what=f"{deployment_id} asleep")

    async def stop_all(self) -> None:
        """Sidecars first (they flush to the hub), then the hub, then NATS."""
        async with anyio.create_task_group() as tg:
            for proc in [*self._moved, *(node.proc for node in self.sidecars.values())]:
                proc.kill(signal.SIGCONT)  # a paused one could not take its SIGTERM
                tg.start_soon(proc.stop)
        self.hub.kill(signal.SIGCONT)
        await self.hub.stop()
        await self.nats.stop()

    # --- the hub's sessions and store ------------------------------------------------------

    async def wait_connected(
        self, deployment_id: str, timeout: float = SIDECAR_START_TIMEOUT
    ) -> None:
        """Until the hub has a session with the deployment's sidecar: as long as
        `mailrun up` gives a sidecar's start before it starts it again."""

        async def connected() -> bool:
            health = await self.healthz()
            sessions = (health or {}).get("sessions", [])
            return any(s.get("deployment_id") == deployment_id for s in sessions)

        await wait_for(connected, timeout=timeout, what=f"a session of {deployment_id}")

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """Read the hub's database directly (read-only; WAL lets it run beside the hub)."""
        if self.database is not None:
            return query(self.database, sql, *args)
        db = sqlite3.connect(f"file:{self.state_dir / 'hub.db'}?mode=ro", uri=True, timeout=10)
        try:
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    def dump_logs(self, lines: int = 60) -> None:
        """Print the tail of every process log (pytest shows it with a failure)."""
        for path in sorted(self.logs.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            print(f"----- {path.name} (last {len(tail)} lines)")
            print("\n".join(tail))


@asynccontextmanager
async def running_cluster(
    root: Path,
    *,
    hub_failpoints: str = "",
    env: dict[str, str] | None = None,
    sidecar_proxies: bool = True,
    database: str | None = None,
    idle_stop: float | None = None,
) -> AsyncIterator[Cluster]:
    """nats-server and the hub (behind ``cluster.hub_proxy``), up and answering.

    Sidecars are started by the test (``start_sidecar``). ``env`` is added to
    the environment of the hub and every sidecar (``MAILRUN_BACKOFF_MAX``,
    say). ``database``: the hub's PostgreSQL URL (default: SQLite).
    ``idle_stop``: the sidecars' ``--idle-stop``, and the cluster wakes the
    asleep ones (``Cluster.wake_loop``). Leaving
    the block stops every process and proxy; on an error the logs are
    printed first.
    """
    (root / "logs").mkdir(parents=True, exist_ok=True)
    nats = NatsServerProcess(log_file=root / "logs" / "nats.log", pdeathsig=True)
    async with AsyncExitStack() as stack:
        await nats.start()
        stack.push_async_callback(nats.stop)
        cluster = Cluster(root, nats, stack, env, sidecar_proxies, database, idle_stop)
        stack.push_async_callback(cluster.aclose)
        await stack.enter_async_context(cluster.hub_proxy)
        try:
            await cluster.start_hub(failpoints=hub_failpoints)
            if idle_stop is not None:
                waker = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(waker.cancel_scope.cancel)
                waker.start_soon(cluster.wake_loop)
            yield cluster
        except BaseException:
            cluster.dump_logs()
            raise
        finally:
            # Processes first, while their proxies still carry their last words.
            with anyio.CancelScope(shield=True):
                await cluster.stop_all()
