"""``mailrun up``: nats-server, the hub and one sidecar per live deployment
that is awake.

Each part is its own OS process (a ``Child``), restarted with backoff when it
dies and killed by the kernel when ``up`` dies. ``up`` learns which sidecars
to run only from the hub's HTTP API and the restore records on disk, so it
never imports sidecar code: the listing says which deployments live (the
fleet, hub/up/fleet/, keeps their sidecars; each poll reads only what
changed since the one before, hub/up/listing.py) and the wake list which
asleep ones have work (hub/up/fleet/wakes.py). Each process is a ``Child``
of hub/up/processes/; what ``up`` runs with is in hub/up/config/. While the
hub is down it keeps the sidecars it has: they reconnect by themselves once
the hub is back. It creates the state dir's admin token before it starts the
hub (which then finds it there), and polls the hub with it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import msgspec

from runtime import (
    FINAL_EXIT_NOTE,
    NATS_URL_ENV,
    SidecarExit,
    Subjects,
    make_private,
    python_m,
    record_path,
    sidecar_env,
    write_atomic,
)
from runtime.config import DEFAULT_SUBJECT_PREFIX, LOOPBACK, redact_url
from runtime.loops import unwrapping_groups
from runtime.sidecar_contract import FORK_SERVER_MODULE, remove_sidecar_state, sidecar_argv
from runtime.wire import DeploymentStatus

from .._client import AsyncHubClient
from .._errors import HubClientError, HubNotReady, NatsNotReady
from .._token import ensure_admin_token
from ..natsauth import hub_seed, producer_users_of, public_key
from .config import (
    UpInfo,
    UpSettings,
    child_env,
    embedded_nats_port,
    hold_listeners,
    hub_url,
    state_lock,
)
from .fleet import Fleet, ForkServer, StartBound, wake_loop
from .listing import Listing
from .nats import EmbeddedConfig, any_greets, find_nats_server, greets, nats_addresses
from .processes import Child, ChildSpec, Start, exec_start

UP_FILE = "up.json"
NATS_CONF = "nats.conf"
SIDECAR_FINAL_CODES = frozenset({SidecarExit.OWNER_CONFLICT, SidecarExit.DELETED})
# Its Sleep was granted: started again when the deployment has work.
ASLEEP_CODES = SIDECAR_FINAL_CODES | {SidecarExit.ASLEEP}
DELETED = DeploymentStatus.DELETED.value


class Up:
    def __init__(
        self,
        config: UpSettings,
        client: AsyncHubClient,
        token: tuple[str, bool],
    ) -> None:
        self.config = config
        self.token, self.token_created = token
        self.state_dir = config.state_dir.resolve()
        self.logs = self.state_dir / "logs"
        self.sidecar_root = self.state_dir / "sidecars"
        self.client = client
        self.env = child_env(config.environ)
        self.fleet = Fleet(
            self._sidecar,
            sleeps=config.sleeps,
            max_awake=config.max_awake,
            say=self._say,
        )
        self.bound = StartBound(
            self.fleet,
            bound=config.sidecar_join_timeout,
            look=self._welcomed,
            nats_up=self._nats_up,
            say=self._say,
        )
        self.nats: Child | None = None
        self.nats_probes: list[tuple[str, int, str | None]] = []  # host, port, server name
        self.hub: Child | None = None
        self.listeners: dict[str, socket.socket] = {}  # option (--http, --smtp) -> held socket
        self.forks: ForkServer | None = None
        self.fork_server: Child | None = None
        self.nats_url = config.nats_url or ""
        self.nats_config: EmbeddedConfig | None = None  # embedded only, not an external one
        # Deleted deployments whose sidecar state dir is gone, or being removed.
        self.discarded: set[str] = set()
        # Seen deleted, their state dir not yet removed.
        self.to_discard: set[str] = set()

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
        start: Start = exec_start,
        pass_fds: tuple[int, ...] = (),
    ) -> Child:
        def on_exit(name: str, code: int, delay: float) -> None:
            why = child.last_error or f"exited with {code} (log {self.logs / name}.log)"
            if child.last_error is None and (said := spec.last_words()) is not None:
                why += f": {said}"
            self._say(f"mailrun up: {name} {why}; restarting in {delay:.1f} s")

        spec = ChildSpec(
            name=name,
            argv=argv,
            log_path=self.logs / f"{name}.log",
            env=self.env if env is None else env,
            cwd=cwd,
            final_codes=final_codes,
            final_note=final_note,
            pass_fds=pass_fds,
        )
        child = Child(
            spec,
            backoff=self.config.backoff,
            stop_grace=self.config.stop_grace,
            on_exit=on_exit,
            start=start,
        )
        return child

    async def run(self, *, task_status: anyio.abc.TaskStatus[UpInfo]) -> None:
        for d in (self.state_dir, self.logs, self.sidecar_root):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Callers want the one error that ended ``up``, not a group of one.
        with state_lock(self.state_dir), unwrapping_groups():
            # What an earlier release (or another umask) left readable to others.
            await anyio.to_thread.run_sync(make_private, self.state_dir)
            listeners = {"--http": self.config.http, "--smtp": self.config.smtp}
            self.listeners = await anyio.to_thread.run_sync(hold_listeners, listeners)
            async with anyio.create_task_group() as tg:
                try:
                    info = await self._start(tg)
                    await tg.start(self.fleet.run)
                    if self.config.sleeps:
                        tg.start_soon(self._wake_loop)
                    if self.config.sidecar_join_timeout > 0:
                        tg.start_soon(self.bound.run)
                    task_status.started(info)
                    await self._watch_deployments(tg)
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop_all()
                        (self.state_dir / UP_FILE).unlink(missing_ok=True)

    async def _start(self, tg: anyio.abc.TaskGroup) -> UpInfo:
        self.nats_url = nats_url = self.config.nats_url or await self._start_nats(tg)
        if not self.nats_probes:
            self.nats_probes = nats_addresses(nats_url)
        # The URL may carry a password: children get it in their environment,
        # which only this user can read, never in argv, which anyone can.
        self.env[NATS_URL_ENV] = nats_url
        if self.config.database is not None:
            from ..store import DATABASE_ENV  # the store's many modules: only with --database

            self.env[DATABASE_ENV] = self.config.database
        argv = [*python_m("hub"), "--state-dir", str(self.state_dir)]
        argv += ["--sidecar-root", str(self.sidecar_root), *self.config.hub_options()]
        # Each hub serves on the sockets up holds: its port is never free
        # while it restarts, and who connects then waits for the next hub.
        fds = {option: sock.fileno() for option, sock in self.listeners.items()}
        for option, fd in fds.items():
            argv += [f"{option}-fd", str(fd)]
        self.hub = self._child("hub", argv, pass_fds=tuple(fds.values()))
        tg.start_soon(self.hub.run)
        await self._wait_hub()
        if self.config.sidecar_start == "fork":
            self._start_fork_server(tg)
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

    def _start_fork_server(self, tg: anyio.abc.TaskGroup) -> None:
        """Started once the hub answers (its imports would slow the hub's start
        on a small machine), before any sidecar: the first forks wait for
        its imports in its socket."""
        self.forks = ForkServer(self._say)
        self.fork_server = self._child(
            "fork-server",
            python_m(FORK_SERVER_MODULE),
            # Every sidecar forked from it shares its memory: a sidecar's
            # environment (the NATS URL, which each gets anyway), no more.
            env=sidecar_env(self.env, home=self.sidecar_root),
            cwd=self.sidecar_root,
            start=self.forks.start_server,
        )
        tg.start_soon(self.fork_server.run)

    async def _start_nats(self, tg: anyio.abc.TaskGroup) -> str:
        port = self.config.nats_port
        if port is None:
            port = embedded_nats_port(self.config.ports)
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
        self.nats_probes = [(LOOPBACK, port, name)]
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

    async def _wake_loop(self) -> None:
        await wake_loop(self.fleet, self.client, wait=self.config.wake_wait, say=self._say)

    async def _watch_deployments(self, tg: anyio.abc.TaskGroup) -> None:
        listing = Listing()
        while True:
            asked_at = anyio.current_time()
            try:
                answer = await self.client.deployments_changed(listing.cursor)
                producers = await self.client.producers("active")
            except HubClientError:
                # Hub down or restarting: keep every sidecar as it is, and
                # count no start's time against it.
                self.bound.answered(False)
            else:
                self.bound.answered(True)
                listing.apply(answer, asked_at)
                self._reconcile(tg, listing, producers.get("producers") or [], asked_at)
            await anyio.sleep(self.config.poll_interval)

    def _reconcile(
        self,
        tg: anyio.abc.TaskGroup,
        listing: Listing,
        producers: list[Any],
        asked_at: float,
    ) -> None:
        # What changed, and what the last pass left to do: a pass over every
        # deployment only when the answer listed them all.
        whole = listing.whole
        among = None if whole else listing.changed | self.fleet.unsettled
        listed = listing.statuses(self.fleet.asleep, among)
        if self.nats_config is not None:
            # Before any sidecar starts: a new one is admitted by this reload
            # (and retries its connect until then); a deleted one is revoked
            # once its sidecar has had time to hear so (hub/up/listing.py).
            # An asleep one stays admitted: it wakes without a reload.
            active = [p for p in producers if isinstance(p, dict)]
            users = listing.users(anyio.current_time())
            self.nats_config.admit(users, self.nats, producer_users_of(active))
        self.fleet.sync(listed, asked_at, whole=whole)
        # Only a deployment the hub says is deleted loses its files, never one
        # that is merely not listed. Its sidecar (stopping, or not ours) holds
        # its home lock until it has exited: the removal waits for that and a
        # later poll tries again.
        self.to_discard |= {dep for dep, status in listed.items() if status == DELETED}
        for dep in sorted(self.to_discard - self.fleet.started() - self.discarded):
            self.discarded.add(dep)
            tg.start_soon(self._discard, dep)

    async def _welcomed(self, dep: str) -> bool | None:
        """Whether the hub has a live session of ``dep`` (None: no answer)."""
        try:
            view = await self.client.deployment(dep)
        except HubClientError:
            return None
        return view.get("connected") is True

    async def _nats_up(self) -> bool:
        """Whether NATS greets (a sidecar could join): ours, or one server of
        ``--nats``; True when there is none to ask."""
        return await any_greets(self.nats_probes)

    def _sidecar(self, dep: str) -> Child | None:
        """The sidecar ``up`` runs for ``dep`` from its restore record here, if any."""
        state = self.sidecar_root / dep
        if dep in self.discarded or not record_path(state, dep).exists():
            return None
        idle_stop = self.config.idle_stop if self.config.sleeps else 0.0
        argv = [*python_m("sidecar"), *sidecar_argv(state, dep, idle_stop=idle_stop)]
        return self._child(
            f"sidecar-{dep}",
            argv,
            ASLEEP_CODES if self.config.sleeps else SIDECAR_FINAL_CODES,
            env=sidecar_env(self.env, home=state),
            cwd=state,
            final_note=state / FINAL_EXIT_NOTE,
            start=self.forks.start if self.forks is not None else exec_start,
        )

    async def _discard(self, dep: str) -> None:
        """Remove a deleted deployment's sidecar state dir (its key, its mail)."""
        directory = self.sidecar_root / dep
        try:
            gone = await anyio.to_thread.run_sync(remove_sidecar_state, directory, dep)
        except OSError as exc:
            # Said once: the next `up` tries again.
            self._say(f"mailrun up: cannot remove {directory}: {exc}")
            return
        if gone:
            self.to_discard.discard(dep)
        else:
            self.discarded.discard(dep)  # a sidecar still runs from it: the next poll tries

    async def _stop_all(self) -> None:
        # The hub keeps serving on its own copies of the listening sockets
        # until it stops; then they close, and new connections are refused
        # instead of waiting for a hub that will not come.
        for sock in self.listeners.values():
            sock.close()
        # Sidecars first (they flush to the hub), then the fork server they
        # die with, then the hub, then NATS.
        await self.fleet.stop_all()
        for part in (self.fork_server, self.hub, self.nats):
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
