"""The hub's NATS side: request handlers, the dispatcher, boot announcements.

Each subject is served by its own loop that hands every request to a task,
with a bounded number in flight per subject: a slow SQLite write on
``hub.events`` never stalls ``hub.hello``, and a flood on one subject
pushes back on that subject only (its subscription buffers, then the bus
drops; every protocol above retries until answered).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import anyio.abc

from runtime import (
    HubBoot,
    Reason,
    Subjects,
    Subscription,
    Transport,
    TransportError,
    Wakeup,
    encode,
)

from ..metrics import HubMetrics
from ..store import Store
from .delivery import (
    POLICY_TIMEOUT,
    DispatchConfig,
    Dispatcher,
    HealthConfig,
    PolicyDriver,
    Prober,
    RolloutDriver,
)
from .events import EventsHandler, GroupCommit, OutboundSink
from .front import Wire
from .notices import Notices
from .requests import (
    GC_INTERVAL,
    BlobCollector,
    BlobHandler,
    Handler,
    MintHandler,
    SleepHandler,
    StateHandler,
    serve,
)
from .retention import DeadLetters, Garbage, RetentionConfig
from .sessions import (
    NONCE_TTL,
    OWNER_LEASE,
    HelloHandler,
    LeaseKeeper,
    Session,
    SessionTable,
)

log = logging.getLogger("mailrun.hub.wire")

"""``handler(data, sender)``: ``sender`` is the deployment whose identity sent
the frame, as its subject proves, or None on a shared subject."""


@dataclass(frozen=True)
class WireConfig:
    dispatch: DispatchConfig = field(default_factory=DispatchConfig)
    max_in_flight: int = 32
    """Requests handled at once per subject."""
    gc_interval: float = GC_INTERVAL
    nonce_ttl: float = NONCE_TTL
    health: HealthConfig = field(default_factory=HealthConfig)
    owner_lease: float = OWNER_LEASE
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    policy_timeout: float = POLICY_TIMEOUT
    """How long a changed policy's SetPolicy waits for its PolicySet (docs/hub.md)."""


async def run_wire(
    *,
    store: Store,
    transport: Transport,
    subjects: Subjects,
    boot_id: str,
    config: WireConfig | None = None,
    outbox: OutboundSink | None = None,
    letters: DeadLetters | None = None,
    metrics: HubMetrics | None = None,
    leases: LeaseKeeper | None = None,
    on_timers: Callable[[], None] | None = None,
    task_status: anyio.abc.TaskStatus[Wire] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the hub's subjects until cancelled; ``task_status.started(wire)``
    once every subscription is up and HubBoot has been announced. Mail to
    outside addresses goes to ``outbox`` (None: recorded as ``no_relay``).
    ``letters`` keeps the dead letters (shared with the mail ingress: one
    table, one set of caps and counters). With ``leases`` (several hubs on
    one PostgreSQL), this hub serves only the deployments it holds a lease
    on, and only on their own subjects (sidecars of this release).
    ``on_timers`` is called after a commit that set a timer (the timer
    loop's wake)."""
    config = config or WireConfig()
    sessions = SessionTable(leases=leases)
    dispatcher = Dispatcher(
        store=store,
        transport=transport,
        subjects=subjects,
        sessions=sessions,
        config=config.dispatch,
        metrics=metrics,
    )
    sleepers = dispatcher.sleepers
    letters = letters or DeadLetters(config.retention)
    collector = BlobCollector(
        store,
        interval=config.gc_interval,
        free_bytes_kept=config.retention.free_bytes_kept,
        changes_kept=config.retention.changes,
    )
    prober = Prober(
        transport=transport,
        subjects=subjects,
        sessions=sessions,
        on_answer=dispatcher.answered,
        config=config.health,
    )
    blobs = BlobHandler(store=store, sessions=sessions)
    notices = Notices(transport, subjects)
    rollouts = RolloutDriver(
        store=store,
        transport=transport,
        subjects=subjects,
        sessions=sessions,
        on_activated=dispatcher.wake,
    )
    policies = PolicyDriver(
        store=store,
        transport=transport,
        subjects=subjects,
        sessions=sessions,
        timeout=config.policy_timeout,
    )

    def moved(deployment_id: str, owner_epoch: int) -> None:
        notices.fenced(deployment_id, owner_epoch, Reason.OWNER_CONFLICT)

    def welcomed(session: Session) -> None:
        sleepers.woke(session.deployment_id)  # the claim deleted its sleep row
        dispatcher.session_opened(session)

    def asleep(session: Session) -> None:
        dispatcher.asleep(session.deployment_id)
        sleepers.fell_asleep(session.deployment_id)

    events_group = GroupCommit(store)
    handlers: dict[str, tuple[str, Handler]] = {
        subjects.hello: (
            "hello",
            HelloHandler(
                store=store,
                sessions=sessions,
                boot_id=boot_id,
                on_welcome=welcomed,
                on_moved=moved,
                nonce_ttl=config.nonce_ttl,
                owner_lease=config.owner_lease,
            ),
        ),
        subjects.events: (
            "events",
            EventsHandler(
                store=store,
                sessions=sessions,
                subject=subjects.events,
                on_released=collector.poke,
                on_accepted=dispatcher.wake,
                letters=letters,
                history=config.retention.run_history,
                outbox=outbox,
                metrics=metrics,
                on_timers=on_timers,
                marks=dispatcher.marks,
                group=events_group,
            ),
        ),
        subjects.blob: ("blob", blobs),
        subjects.mint: ("mint", MintHandler(store=store, sessions=sessions)),
        subjects.state: ("state", StateHandler(store=store, sessions=sessions)),
        subjects.sleep: (
            "sleep",
            SleepHandler(store=store, sessions=sessions, on_asleep=asleep, writes=events_group),
        ),
    }
    subscriptions: list[Subscription] = []
    announcing = Wakeup()
    await sleepers.load()
    try:
        async with anyio.create_task_group() as tg:
            if leases is not None:

                def lost(deployment_ids: set[str]) -> None:
                    for dep in deployment_ids:
                        sessions.drop(dep)
                        dispatcher.forget(dep)

                # A deployment taken over: its sidecar says hello to this hub.
                leases.on_gained = lambda deployment_ids: announcing.set()
                leases.on_lost = lost
                await tg.start(leases.run)
            await tg.start(events_group.run)
            await tg.start(dispatcher.run)
            tg.start_soon(collector.run)
            tg.start_soon(prober.run)
            tg.start_soon(notices.run)
            tg.start_soon(rollouts.run)
            tg.start_soon(policies.run)
            for subject, (source, handler) in handlers.items():
                # <subject>.<dep>: sidecars of this release, each on its own
                # (the permissions let only its identity publish there);
                # <subject>: sidecars of an earlier release.
                for per_deployment in (True, False) if leases is None else (True,):
                    sub = await transport.subscribe(f"{subject}.*" if per_deployment else subject)
                    subscriptions.append(sub)
                    tg.start_soon(
                        serve,
                        Garbage(store, letters, config.retention.garbage_bytes),
                        sub,
                        source,
                        handler,
                        config.max_in_flight,
                        "dep" if per_deployment else None,
                        None if leases is None else leases.serves,
                    )
            await transport.flush()

            async def announce() -> None:
                try:
                    await transport.publish(subjects.announce, encode(HubBoot(boot_id=boot_id)))
                except TransportError as exc:
                    log.warning("cannot announce hub boot: %s", exc)

            # A sidecar that lost the bus with the hub may have missed frames
            # meant for it: after a reconnect every sidecar says hello again.
            transport.on_reconnect(announce)
            await announce()

            async def announce_takeovers() -> None:
                while True:
                    await announcing.wait()
                    await announce()

            tg.start_soon(announce_takeovers)
            wire_side = Wire(
                sessions, dispatcher, notices, config.health, letters, rollouts, leases, policies
            )
            if leases is not None:
                leases.report = wire_side.local_health
            task_status.started(wire_side)
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
            for sub in subscriptions:
                with contextlib.suppress(TransportError):
                    await sub.unsubscribe()
        blobs.close()
