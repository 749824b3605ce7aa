"""The sidecar process: boot from the restore record, then serve the deployment.

Boot order (each step works without the next): restore record -> home
(the state directory, locked: one process per directory) -> inbox
(migrations) -> workflow code -> runs (pending envelopes are processed from
disk at once) -> record rewritten in this release's format -> NATS (waits
for the server as long as it takes) -> hello, delivery, events shipper.

Every start is a new incarnation (a fresh instance id); the hub knows the
home it runs from, so a restart in the same directory takes ownership back
at once and carries on from its disk, while a copy of the directory (or of
the restore record) is refused, or, with ``--takeover``, starts from the
hub's state of every run (see ``hub.wire.ownership``).

With an idle time (``SidecarOptions.idle_stop``, ``--idle-stop``) it also
runs the sleeper (``_sleep``): idle that long, it asks the hub to sleep, and
stops when the hub grants it (:attr:`Sidecar.asleep`).
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import AbstractAsyncContextManager, AsyncExitStack, closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import anyio
import msgspec

from runtime import (
    Backoff,
    RestoreRecord,
    Retry,
    Subjects,
    Transport,
    Wakeup,
    Welcome,
    new_id,
    open_nats,
    read_restore_record,
    running_loop,
    unwrap_group,
    write_restore_record,
)
from runtime.sqlite import Synchronous
from runtime.wire import LEGACY_POLICY, public_key_of

from ._errors import FencedOut, HubUnavailable, WorkflowLoadError
from ._home import Home
from ._record import locate
from ._sleep import REFUSED, Sleeper
from .execution import Handler, Runs, RunsConfig, Versions, load_workflow, mail_domain
from .link import Activity, Control, Delivery, HubLink, Identity, Shipper
from .storage import ADOPT_MARK, Inbox

log = logging.getLogger("mailrun.sidecar")


class Connect(Protocol):
    """Opens the sidecar's bus connection: ``open_nats``, or a test's bus."""

    def __call__(
        self, url: str, name: str, *, seed: str | None, inbox_prefix: str
    ) -> AbstractAsyncContextManager[Transport]: ...


_RETRY = Backoff(initial=0.05, maximum=1.0)
"""Hello and events to the hub: a restarted hub sees its sidecars back within 2 s."""
_MINT_RETRY = Backoff(initial=0.1, maximum=1.0)


def _nats(backoff_max: float | None) -> Connect:
    def connect(
        url: str, name: str, *, seed: str | None, inbox_prefix: str
    ) -> AbstractAsyncContextManager[Transport]:
        return open_nats(
            url, name=name, seed=seed, inbox_prefix=inbox_prefix, backoff_max=backoff_max
        )

    return connect


@dataclass(frozen=True)
class SidecarOptions:
    state_dir: Path
    deployment_id: str | None = None
    nats_url: str | None = None
    """Overrides the record's URL for this process (the record keeps its own)."""
    takeover: bool = False
    runs: RunsConfig = field(default_factory=RunsConfig)
    hello_timeout: float = 1.0
    request_timeout: float = 2.0
    mint_patience: float = 30.0
    """How long ``ctx.spawn`` waits for the hub before the handler call fails."""
    backoff_max: float | None = None
    """Caps the delays of every retry loop talking to the hub or NATS (1 s
    each by default): how tests and soaks compress time (``MAILRUN_BACKOFF_MAX``)."""
    synchronous: Synchronous = Synchronous.FULL
    """SQLite's durability for the inbox (``MAILRUN_SQLITE_SYNCHRONOUS``, read
    where the process starts): ``NORMAL`` only for a benchmark."""
    idle_stop: float = 0.0
    """Seconds with nothing to do before it asks the hub to sleep (0: never)."""


class Sidecar:
    def __init__(self, options: SidecarOptions, *, connect: Connect | None = None) -> None:
        self.options = options
        self._connect = connect or _nats(options.backoff_max)
        self.started = anyio.Event()
        """Set once the inbox is open and the runs are restored."""
        self.inbox: Inbox | None = None
        self.runs: Runs | None = None
        self.link: HubLink | None = None
        self.shipper: Shipper | None = None
        self.versions: Versions | None = None
        self.record: RestoreRecord | None = None
        self._record_path: Path | None = None
        self._record_lock = anyio.Lock()  # one writer: the temp file is per process
        self._record_stale = Wakeup()
        self.instance_id = new_id("ins")
        """This process: every start is a new incarnation."""
        self._previous_instance: str | None = None
        self._serving = anyio.CancelScope()
        self.sleeper: Sleeper | None = None
        """Its idle clock, while it serves with an idle time."""
        self.asleep = False
        """The hub granted its Sleep: it stopped for that (exit ``ASLEEP``)."""

    async def run(self) -> None:
        """Serve until stopped or cancelled; raises :class:`FencedOut` when this
        process may not act for the deployment (:class:`OwnerConflict`: another
        process owns it; :class:`DeploymentGone`: it was deleted), and
        :class:`HomeLocked` when another process runs from the same directory."""
        try:
            await self._run()
        except* FencedOut as group:
            raise unwrap_group(group) from None

    async def _run(self) -> None:
        path = locate(self.options.state_dir, self.options.deployment_id)
        record, version = read_restore_record(path)
        self._record_path = path
        async with AsyncExitStack() as stack:
            home = stack.enter_context(Home(path.parent))
            inbox = await Inbox.open(path.parent / "inbox.db", synchronous=self.options.synchronous)
            stack.push_async_callback(inbox.aclose)
            self.inbox = inbox
            self._previous_instance = record.instance_id or await inbox.get_meta("instance_id")
            self.versions = Versions(
                inbox=inbox,
                deployment_id=record.deployment_id,
                home=path.parent,
                first=_load(record, path.parent / "src"),
                first_entrypoint=record.sources.entrypoint,
            )
            runs = Runs(
                inbox=inbox,
                deployment_id=record.deployment_id,
                handler=self.versions.first,
                minter=self,
                on_commit=self._committed,
                # Message-IDs carry the domain of the deployment's address.
                config=replace(self.options.runs, mail_domain=mail_domain(record.address)),
                versions=self.versions,
            )
            self.runs = await stack.enter_async_context(runs)
            self.record = msgspec.structs.replace(
                record, public_key=record.public_key or public_key_of(record.hub_key.seed)
            )
            if version < 2 or self.record != record:
                await self._persist()
            self.started.set()
            log.info(
                "deployment %s restored (instance %s, %s, processed up to seq %d, loop %s)",
                record.deployment_id,
                self.instance_id,
                home.id,
                inbox.last_seq,
                running_loop(),
            )
            with self._serving:
                url = self.options.nats_url or record.nats_url
                # Its own identity (a record from before identities has none)
                # and its own reply inbox, the only one it may subscribe to.
                async with self._connect(
                    url,
                    f"sidecar {record.deployment_id}",
                    seed=record.nats_seed,
                    inbox_prefix=Subjects.inbox_prefix(record.deployment_id),
                ) as transport:
                    await self._serve(transport, self.record, inbox, home.id)

    def stop(self) -> None:
        """Stop in order: close the hub link and NATS, let the runs finish their
        current batch, close the inbox. (Cancelling ``run`` stops at once.)"""
        self._serving.cancel()

    def nudge(self) -> None:
        """Sleep now if idle (SIGUSR1); nothing without an idle time."""
        if self.sleeper is not None:
            self.sleeper.nudge()

    def _asleep(self) -> None:
        self.asleep = True
        self.stop()

    async def _serve(
        self, transport: Transport, record: RestoreRecord, inbox: Inbox, home: str
    ) -> None:
        assert record.public_key is not None
        subjects = Subjects(record.subject_prefix, deployment_id=record.deployment_id)
        retry = _RETRY.capped(self.options.backoff_max)
        link = HubLink(
            transport=transport,
            subjects=subjects,
            identity=Identity(
                record.deployment_id,
                self.instance_id,
                record.hub_key.seed,
                record.public_key,
                home=home,
                previous_instance=self._previous_instance or "",
            ),
            takeover=self.options.takeover,
            hello_timeout=self.options.hello_timeout,
            request_timeout=self.options.request_timeout,
            backoff=retry,
            on_welcome=self._welcomed,
            activity=Activity(),
        )
        self.link = link
        self.shipper = Shipper(
            inbox=inbox,
            link=link,
            timeout=self.options.request_timeout,
            backoff=retry,
            on_floor=self._raise_floor,
        )
        # Its own task: a rollout (a blob fetch, an import) never holds mail.
        assert self.runs is not None
        control = Control(
            link=link,
            deployment_id=record.deployment_id,
            versions=self.versions,
            set_policy=self.runs.set_policy,
        )
        delivery = Delivery(
            inbox=inbox,
            link=link,
            deployment_id=record.deployment_id,
            on_stored=self._stored,
            control=control,
            versions=self.versions,
        )
        if self.options.idle_stop > 0:
            self.sleeper = Sleeper(
                idle_stop=self.options.idle_stop,
                link=link,
                runs_idle=self.runs.idle,
                inbox=inbox,
                on_asleep=self._asleep,
                backoff=REFUSED.capped(self.options.backoff_max),
            )
        inbound = await transport.subscribe(subjects.inbound(record.deployment_id))
        # Closed here too: a stop may come before its task has started.
        with closing(control):
            async with anyio.create_task_group() as tg:
                tg.start_soon(control.run)
                tg.start_soon(delivery.run, inbound)
                tg.start_soon(link.watch_announcements)
                tg.start_soon(self.shipper.run)
                tg.start_soon(self._keep_record)
                tg.start_soon(link.run)
                if self.sleeper is not None:
                    tg.start_soon(self.sleeper.run)

    async def _persist(self) -> None:
        assert self.record is not None and self._record_path is not None
        async with self._record_lock:
            await anyio.to_thread.run_sync(write_restore_record, self._record_path, self.record)

    async def _keep_record(self) -> None:
        """Write the latest session id back to the record, off the welcome's
        path: nothing reads it to act, and after a hub restart a hundred
        sidecars syncing a file each before taking their session held back
        the frames the hub sent them meanwhile."""
        while True:
            await self._record_stale.wait()
            await self._persist()

    async def _welcomed(self, welcome: Welcome) -> None:
        assert self.inbox is not None and self.runs is not None and self.record is not None
        assert self.link is not None
        if welcome.from_hub:
            await self.inbox.set_meta(ADOPT_MARK, 1)
        if await self.inbox.get_meta(ADOPT_MARK):
            # Raises on any trouble: the welcome is then not taken, the link
            # says hello again, and the mark makes the next welcome adopt.
            runs, floor, settled = await self.link.fetch_state(welcome)
            await self.runs.adopt(runs, floor, settled)
        if self._previous_instance:
            # The hub now knows this home: the id an earlier release kept
            # has served its one purpose.
            await self.inbox.set_meta("instance_id", None)
            self.record = msgspec.structs.replace(self.record, instance_id=None)
            await self._persist()
            self._previous_instance = None
            self.link.identity = dataclasses.replace(self.link.identity, previous_instance="")
        await self.runs.set_policy(welcome.policy or LEGACY_POLICY)
        await self._raise_floor(welcome.floor_seq)
        if self.record.session_id != welcome.session_id:
            self.record = msgspec.structs.replace(self.record, session_id=welcome.session_id)
            self._record_stale.set()

    async def _raise_floor(self, floor: int) -> None:
        """The hub settled every dispatch up to ``floor`` (a Welcome, an
        EventsAck): nothing at or below it is waited for or processed here."""
        assert self.inbox is not None and self.runs is not None
        skipped = await self.inbox.raise_floor(floor)
        if skipped:
            log.warning("hub settled %d pending envelope(s) elsewhere; skipped them", skipped)
        self.runs.kick()

    def _committed(self) -> None:
        if self.link is not None:
            self.link.activity.poke()  # a batch or a step: the end of a handler's work
        if self.shipper is not None:
            self.shipper.wake()

    def _stored(self) -> None:
        if self.runs is not None:
            self.runs.kick()

    async def mint_child(self, parent_run_id: str, request_id: str) -> str:
        """The runs' minter: the hub mints child runs. A short hub outage is
        waited out (the request id makes retries safe) instead of costing the
        handler an attempt of its retry budget."""
        retry = Retry(_MINT_RETRY.capped(self.options.backoff_max))
        with anyio.move_on_after(self.options.mint_patience):
            while True:
                link = self.link
                if link is not None and await link.wait_session(1.0) is not None:
                    try:
                        return await link.mint_child(parent_run_id, request_id)
                    except HubUnavailable as exc:
                        log.info("minting a child of %s: %s; retrying", parent_run_id, exc)
                retry.failed()
                await retry.wait()
        raise HubUnavailable(
            f"no hub to mint a child run of {parent_run_id} within {self.options.mint_patience}s"
        )


def _load(record: RestoreRecord, src_dir: Path) -> Handler:
    try:
        return load_workflow(record.sources, src_dir, record.deployment_id)
    except WorkflowLoadError as exc:
        # The sidecar still serves: each run fails visibly with this error
        # (after the usual retries) instead of the process crash-looping.
        log.error("workflow of %s does not load: %s", record.deployment_id, exc)
        message = str(exc)

        async def broken(ctx: Any, item: Any) -> None:
            raise WorkflowLoadError(message)

        return broken
