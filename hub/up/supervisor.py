"""``mailrun up``: nats-server, the hub and one sidecar per live deployment.

Each part is its own OS process (a ``Child``), restarted with backoff when it
dies and killed by the kernel when ``up`` dies. ``up`` learns which sidecars
to run only from the hub's HTTP API and the restore records on disk, so it
never imports sidecar code. While the hub is down it keeps the sidecars it
has: they reconnect by themselves once the hub is back. It creates the state
dir's admin token before it starts the hub (which then finds it there), and
polls the hub with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import socket
import sys
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from runtime import (
    FINAL_EXIT_NOTE,
    NATS_URL_ENV,
    SidecarExit,
    Subjects,
    is_id,
    make_private,
    record_path,
    sidecar_env,
    write_atomic,
)
from runtime.config import (
    DEFAULT_HTTP,
    DEFAULT_NATS_PORT,
    DEFAULT_SUBJECT_PREFIX,
    LOOPBACK,
    HostPort,
    parse_host_port,
    redact_url,
)
from runtime.loops import unwrapping_groups
from runtime.sidecar_contract import remove_sidecar_state
from runtime.wire import DeploymentStatus, anchor_is_live

from .._client import AsyncHubClient
from .._errors import HubClientError, HubNotReady, NatsNotReady, UpAlreadyRunning
from .._token import ensure_admin_token
from ..natsauth import hub_seed, producer_users_of, public_key, users_of
from ..store import DATABASE_ENV
from .children import Backoff, Child, ChildSpec
from .nats import EmbeddedConfig, find_nats_server, free_port, greets

UP_FILE = "up.json"
NATS_CONF = "nats.conf"
SIDECAR_FINAL_CODES = frozenset({SidecarExit.OWNER_CONFLICT, SidecarExit.DELETED})


@dataclass(frozen=True)
class UpSettings:
    """What ``mailrun up`` runs with, read where it starts (its options and its
    environment), then handed down."""

    state_dir: Path
    http: str = DEFAULT_HTTP  # HOST:PORT; a fixed port, since up announces it
    nats_url: str | None = None
    # The embedded server's port: None takes 4222 when free, else any free one.
    nats_port: int | None = None
    subject_prefix: str | None = None
    domains: tuple[str, ...] = ()  # the hub's mail domains, passed on (the first: the default)
    smtp_relay: str | None = None  # HOST:PORT, passed on to the hub
    dkim: tuple[str, ...] = ()  # the hub's --dkim-key/--dkim-selector options, paths absolute
    smtp: str | None = None  # HOST:PORT of the hub's SMTP ingress
    smtp_cert: Path | None = None  # its STARTTLS certificate and key (absolute), passed on
    smtp_key: Path | None = None
    dns_server: str | None = None  # ADDRESS:PORT of the SMTP sender checks' resolver, passed on
    smtp_trusted_relays: tuple[str, ...] = ()  # passed on, one --smtp-trusted-relay each
    database: str | None = field(default=None, repr=False)  # the hub's, via its environment
    poll_interval: float = 0.5
    stop_grace: float = 5.0
    backoff: Backoff = field(default_factory=Backoff)
    nats_ready_timeout: float = 15.0
    hub_ready_timeout: float = 60.0
    request_timeout: float = 2.0
    say: Callable[[str], None] | None = None
    environ: Mapping[str, str] = field(kw_only=True, repr=False)
    """Its environment, which its children inherit (the relay's and the SMTP
    ingress's logins among it: never in ``repr``)."""


@dataclass(frozen=True)
class UpInfo:
    pid: int
    http: str  # the URL the hub answers on
    nats_url: str  # as shown: without credentials
    state_dir: Path
    admin_token: str = field(repr=False)
    token_created: bool  # by this start: the first of this state dir

    @property
    def console_url(self) -> str:
        """The URL that logs a browser in (it holds the token)."""
        return f"{self.http}/?token={self.admin_token}"


def hub_url(http: str) -> str:
    """The URL to reach a hub listening on ``H:P`` (a wildcard host means loopback)."""
    host, port = parse_host_port(http)
    host = {"0.0.0.0": LOOPBACK, "::": "::1"}.get(host, host)
    return f"http://{HostPort(host, port)}"


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _state_lock(state_dir: Path) -> Iterator[None]:
    """One ``up`` per state dir: two would fight over the same sidecars."""
    fd = os.open(state_dir / "up.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UpAlreadyRunning(f"another `mailrun up` runs on {state_dir}") from None
        yield
    finally:
        os.close(fd)


def _child_env(environ: Mapping[str, str]) -> dict[str, str]:
    env = {**environ, "PYTHONUNBUFFERED": "1"}
    # Children must run the same code as this supervisor. Installed, they find
    # it anyway; from a checkout, they need its root on their path.
    root = Path(__file__).resolve().parent.parent
    if root not in {Path(sysconfig.get_path(k)).resolve() for k in ("purelib", "platlib")}:
        paths = [str(root), *filter(None, environ.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


class Up:
    def __init__(self, config: UpSettings, client: AsyncHubClient, token: tuple[str, bool]) -> None:
        self.config = config
        self.token, self.token_created = token
        self.state_dir = config.state_dir.resolve()
        self.logs = self.state_dir / "logs"
        self.sidecar_root = self.state_dir / "sidecars"
        self.client = client
        self.env = _child_env(config.environ)
        self.sidecars: dict[str, Child] = {}
        self.nats: Child | None = None
        self.hub: Child | None = None
        self.nats_url = config.nats_url or ""
        self.nats_config: EmbeddedConfig | None = None  # embedded only, not an external one
        # Deleted deployments whose sidecar state dir is gone, or being removed.
        self.discarded: set[str] = set()

    def _say(self, line: str) -> None:
        if self.config.say is not None:
            self.config.say(line)

    def _child(
        self,
        name: str,
        argv: list[str],
        final_codes: frozenset[int] = frozenset(),
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        final_note: Path | None = None,
    ) -> Child:
        def on_exit(name: str, code: int, delay: float) -> None:
            why = child.last_error or f"exited with {code} (log {self.logs / name}.log)"
            self._say(f"mailrun up: {name} {why}; restarting in {delay:.1f} s")

        spec = ChildSpec(
            name=name,
            argv=argv,
            log_path=self.logs / f"{name}.log",
            env=self.env if env is None else env,
            cwd=cwd,
            final_codes=final_codes,
            final_note=final_note,
        )
        child = Child(
            spec, backoff=self.config.backoff, stop_grace=self.config.stop_grace, on_exit=on_exit
        )
        return child

    async def run(self, *, task_status: anyio.abc.TaskStatus[UpInfo]) -> None:
        for d in (self.state_dir, self.logs, self.sidecar_root):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Callers want the one error that ended ``up``, not a group of one.
        with _state_lock(self.state_dir), unwrapping_groups():
            # What an earlier release (or another umask) left readable to others.
            await anyio.to_thread.run_sync(make_private, self.state_dir)
            async with anyio.create_task_group() as tg:
                try:
                    info = await self._start(tg)
                    task_status.started(info)
                    await self._watch_deployments(tg)
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop_all()
                        (self.state_dir / UP_FILE).unlink(missing_ok=True)

    async def _start(self, tg: anyio.abc.TaskGroup) -> UpInfo:
        self.nats_url = nats_url = self.config.nats_url or await self._start_nats(tg)
        # The URL may carry a password: children get it in their environment,
        # which only this user can read, never in argv, which anyone can.
        self.env[NATS_URL_ENV] = nats_url
        if self.config.database is not None:
            self.env[DATABASE_ENV] = self.config.database
        argv = [sys.executable, "-m", "hub", "--state-dir", str(self.state_dir)]
        argv += ["--http", self.config.http, "--sidecar-root", str(self.sidecar_root)]
        if self.config.subject_prefix:
            argv += ["--subject-prefix", self.config.subject_prefix]
        for domain in self.config.domains:
            argv += ["--domain", domain]
        if self.config.smtp_relay:
            # Its login stays in the environment the hub inherits, out of argv.
            argv += ["--smtp-relay", self.config.smtp_relay]
        argv += self.config.dkim
        if self.config.smtp:
            # Its login, too, stays in the environment.
            argv += ["--smtp", self.config.smtp]
            for flag, path in (
                ("--smtp-cert", self.config.smtp_cert),
                ("--smtp-key", self.config.smtp_key),
            ):
                if path is not None:
                    argv += [flag, str(path)]
            if self.config.dns_server:
                argv += ["--dns-server", self.config.dns_server]
            for relay in self.config.smtp_trusted_relays:
                argv += ["--smtp-trusted-relay", relay]
        self.hub = self._child("hub", argv)
        tg.start_soon(self.hub.run)
        await self._wait_hub()
        info = UpInfo(
            os.getpid(),
            self.client.base_url,
            redact_url(nats_url),
            self.state_dir,
            admin_token=self.token,
            token_created=self.token_created,
        )
        up = {"pid": info.pid, "http": info.http, "nats_url": info.nats_url}
        write_atomic(self.state_dir / UP_FILE, msgspec.json.encode(up), mode=0o600)
        return info

    async def _start_nats(self, tg: anyio.abc.TaskGroup) -> str:
        port = self.config.nats_port
        if port is None:
            port = DEFAULT_NATS_PORT if port_is_free(DEFAULT_NATS_PORT) else free_port()
        name = f"mailrun-up-{os.getpid()}-{secrets.token_hex(4)}"
        # No anonymous clients: the hub from the start, deployments as they come.
        hub_user = public_key(await anyio.to_thread.run_sync(hub_seed, self.state_dir))
        subjects = Subjects(self.config.subject_prefix or DEFAULT_SUBJECT_PREFIX)
        self.nats_config = EmbeddedConfig(
            self.state_dir / NATS_CONF,
            host=LOOPBACK,
            port=port,
            server_name=name,
            hub_user=hub_user,
            subjects=subjects,
        )
        self.nats_config.write()
        argv = [str(find_nats_server()), "-c", str(self.nats_config.path)]
        self.nats = self._child("nats", argv)
        tg.start_soon(self.nats.run)
        # The hub would only crash-loop until NATS listens; wait for it first,
        # and for ours: a port that answers may be another process's server.
        try:
            with anyio.fail_after(self.config.nats_ready_timeout):
                # Another process, no event to wait on: poll, under the deadline.
                while True:
                    if await greets(LOOPBACK, port, name):
                        break
                    await anyio.sleep(0.05)
        except TimeoutError:
            log = self.logs / "nats.log"
            raise NatsNotReady(f"nats-server did not listen on port {port}; see {log}") from None
        return f"nats://{LOOPBACK}:{port}"

    async def _wait_hub(self) -> None:
        timeout = self.config.hub_ready_timeout
        with anyio.move_on_after(timeout):
            while True:
                with contextlib.suppress(HubClientError):
                    await self.client.healthz()
                    return
                await anyio.sleep(0.1)
        log = self.logs / "hub.log"
        url = self.client.base_url
        raise HubNotReady(f"the hub did not answer {url}/healthz within {timeout:g} s; see {log}")

    async def _watch_deployments(self, tg: anyio.abc.TaskGroup) -> None:
        while True:
            try:
                listing = await self.client.deployments()
                producers = await self.client.producers("active")
            except HubClientError:
                pass  # hub down or restarting: keep every sidecar as it is
            else:
                deployments = listing.get("deployments") or []
                self._reconcile(tg, deployments, producers.get("producers") or [])
            await anyio.sleep(self.config.poll_interval)

    def _reconcile(
        self, tg: anyio.abc.TaskGroup, deployments: list[Any], producers: list[Any]
    ) -> None:
        # Ids become path components below: only well-formed ones count.
        listed = {
            d["id"]: str(d.get("status", ""))
            for d in deployments
            if isinstance(d, dict) and is_id(d.get("id"), "dep")
        }
        live = {dep for dep, status in listed.items() if anchor_is_live(status)}
        if self.nats_config is not None:
            # Before any sidecar starts: a new one is admitted by this reload
            # (and retries its connect until then); a deleted one is revoked.
            live_items = [d for d in deployments if isinstance(d, dict) and d.get("id") in live]
            active = [p for p in producers if isinstance(p, dict)]
            self.nats_config.admit(users_of(live_items), self.nats, producer_users_of(active))
        for dep in sorted(live - self.sidecars.keys()):
            state = self.sidecar_root / dep
            if record_path(state, dep).exists():
                argv = [sys.executable, "-m", "sidecar", "--state-dir", str(state)]
                argv += ["--deployment", dep]
                child = self.sidecars[dep] = self._child(
                    f"sidecar-{dep}",
                    argv,
                    SIDECAR_FINAL_CODES,
                    env=sidecar_env(self.env, home=state),
                    cwd=state,
                    final_note=state / FINAL_EXIT_NOTE,
                )
                tg.start_soon(self._run_sidecar, child)
        for dep in sorted(self.sidecars.keys() - live):
            tg.start_soon(self.sidecars.pop(dep).stop)
        # Only a deployment the hub says is deleted loses its files, never one
        # that is merely not listed. Its sidecar (stopping above, or not ours)
        # holds its home lock until it has exited: the removal waits for that
        # and a later poll tries again.
        deleted = {dep for dep, status in listed.items() if status == DeploymentStatus.DELETED}
        for dep in sorted(deleted - self.sidecars.keys() - self.discarded):
            self.discarded.add(dep)
            tg.start_soon(self._discard, dep)

    async def _discard(self, dep: str) -> None:
        """Remove a deleted deployment's sidecar state dir (its key, its mail)."""
        directory = self.sidecar_root / dep
        try:
            gone = await anyio.to_thread.run_sync(remove_sidecar_state, directory, dep)
        except OSError as exc:
            # Said once: the next `up` tries again.
            self._say(f"mailrun up: cannot remove {directory}: {exc}")
            return
        if not gone:
            self.discarded.discard(dep)  # a sidecar still runs from it: the next poll tries

    async def _run_sidecar(self, child: Child) -> None:
        await child.run()
        if child.final_code is not None:
            # Kept in self.sidecars: a deployment that moved away (or was
            # deleted) is not started again by this supervisor.
            why = "was deleted" if child.final_code == SidecarExit.DELETED else "is owned elsewhere"
            self._say(f"mailrun up: {child.name} stopped: its deployment {why}")

    async def _stop_all(self) -> None:
        # Sidecars first (they flush to the hub), then the hub, then NATS.
        async with anyio.create_task_group() as tg:
            for child in self.sidecars.values():
                tg.start_soon(child.stop)
        self.sidecars.clear()
        for part in (self.hub, self.nats):
            if part is not None:
                await part.stop()


async def run_up(
    config: UpSettings, *, task_status: anyio.abc.TaskStatus[UpInfo] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Run the supervisor until cancelled; ``task_status`` gets ``UpInfo`` once the
    hub answers ``/healthz``. On cancellation every child is stopped (SIGTERM,
    SIGKILL after ``stop_grace``) before this returns."""
    token = await anyio.to_thread.run_sync(ensure_admin_token, config.state_dir)
    url = hub_url(config.http)
    async with AsyncHubClient(url, timeout=config.request_timeout, token=token[0]) as client:
        await Up(config, client, token).run(task_status=task_status)
