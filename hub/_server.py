"""The hub process: store, acceptor, NATS wire side and mail ingress, outbound
relay, timer and schedule loops, SMTP ingress and HTTP API in one task group.

Shutdown is orderly: on SIGTERM/SIGINT (or cancellation) the long polls of
``GET /workflows/wakes`` answer at once, the HTTP server stops taking
requests and finishes the ones in flight (bounded), the SMTP server
answers the messages it is accepting (bounded) and closes, then the
acceptor and the wire side are cancelled and the store is closed. Nothing
accepted is lost at any point: an answer "accepted" is only ever sent after
its transaction committed.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AsyncExitStack, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.abc

from runtime import (
    Backoff,
    Subjects,
    Transport,
    cancel_on_signals,
    make_private,
    new_id,
    open_nats,
    running_loop,
    tracing,
)
from runtime.config import HostPort, redact_url

from . import smtp
from ._errors import HubError
from ._listeners import listening_socket
from ._settings import HubSettings
from ._token import ensure_admin_token
from .api import ApiSettings, ChangeFeed, HttpServer, create_app, mail_answers
from .clock import Scheduler, TimerLoop
from .intake import Acceptor
from .metrics import HubMetrics
from .natsauth import hub_seed
from .outbound import Outbox
from .store import Store, give_nats_identities, open_store
from .wire import (
    DeadLetters,
    IngressConfig,
    LeaseKeeper,
    WireConfig,
    hub_identity,
    run_ingress,
    run_wire,
)

log = logging.getLogger("mailrun.hub")

SHARED_IDLE_LOOK = 5.0
"""Seconds: how often the schedule loop looks at a table other hubs write
(a schedule added through another hub cannot wake this one)."""


class WireSide(Protocol):
    """What the hub needs from the started wire side (``hub.wire.front.Wire``)."""

    def on_accepted(self, deployment_ids: set[str]) -> object: ...

    def on_deleted(self, deployment_id: str) -> object: ...

    def on_rollout(self, deployment_id: str) -> object: ...

    def on_policy(self, deployment_id: str) -> object: ...

    async def wakes_after(self, wait: float, cursor: str | None) -> tuple[list[str], str]: ...

    def close_polls(self) -> None: ...

    def health(self) -> Mapping[str, Any]: ...

    def deployment_health(self, deployment_id: str) -> Mapping[str, Any]: ...

    def metrics(self) -> str: ...


WireFactory = Callable[..., Coroutine[Any, Any, None]]
"""``run_wire``-shaped: keyword arguments store, transport, subjects, boot_id,
config, outbox, letters, metrics, on_timers, task_status; reports a :class:`WireSide` through
``task_status.started``."""


@dataclass(frozen=True)
class HubHandle:
    """What :func:`serve_hub` reports once the hub serves HTTP."""

    boot_id: str
    http_url: str
    store: Store
    acceptor: Acceptor
    smtp_address: str | None = None  # HOST:PORT of the SMTP ingress, when it runs


async def serve_hub(
    settings: HubSettings,
    *,
    wire: WireFactory | None = None,
    transport: Transport | None = None,
    handle_signals: bool = False,
    task_status: anyio.abc.TaskStatus[HubHandle] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run the hub until cancelled (or, with ``handle_signals``, SIGTERM/SIGINT).

    ``transport`` replaces the NATS connection (tests); ``wire`` replaces
    ``hub.wire.service.run_wire``.
    """
    boot_id = new_id("boot")
    admin_token = settings.admin_token
    if admin_token is None:
        admin_token = (await anyio.to_thread.run_sync(ensure_admin_token, settings.state_dir))[0]
    # Bound (or taken from `mailrun up`) before anything else starts: a port
    # clash stops the hub at once, and port 0 gives a known port.
    sock = listening_socket(settings.http_fd, settings.http_host, settings.http_port)
    host, port = sock.getsockname()[:2]
    http_url = f"http://{HostPort(host, port)}"
    smtp_sock = None
    try:
        if settings.smtp is not None:
            smtp_sock = listening_socket(settings.smtp_fd, settings.smtp.host, settings.smtp.port)
        async with AsyncExitStack() as stack:
            store = await open_store(
                settings.database or settings.state_dir / "hub.db",
                busy_timeout=settings.busy_timeout,
                synchronous=settings.process.sqlite_synchronous,
            )
            stack.push_async_callback(store.aclose)
            if settings.sidecar_root is not None:
                await give_nats_identities(store, settings.sidecar_root)
            if transport is None:
                # Its own NATS identity, whether or not the server asks for one.
                seed = await anyio.to_thread.run_sync(hub_seed, settings.state_dir)
                transport = await stack.enter_async_context(
                    open_nats(
                        settings.nats_url,
                        name=f"mailrun-hub-{boot_id}",
                        seed=seed,
                        backoff_max=settings.backoff_max,
                    )
                )
            metrics = HubMetrics()

            async def reconnected() -> None:
                metrics.nats_reconnects.inc()

            transport.on_reconnect(reconnected)
            async with anyio.create_task_group() as tg:
                acceptor = Acceptor(store, metrics=metrics)
                await tg.start(acceptor.run)
                outbox = Outbox(
                    store, settings.relay, backoff_max=settings.backoff_max, dkim=settings.dkim
                )
                # On PostgreSQL, hubs share the deployments by lease: a second
                # hub on the same database joins by starting (docs/scaling.md).
                shared: dict[str, Any] = {}
                if store.dialect == "postgresql":
                    hub_id = await anyio.to_thread.run_sync(hub_identity, settings.state_dir)
                    leases = shared["leases"] = LeaseKeeper(store, hub_id, http_url=http_url)
                    # One hub at a time relays: another's "sending" rows are
                    # not left over from a crash.
                    tg.start_soon(leases.with_role, "relay", outbox.run)
                else:
                    # Before the wire: what the last hub left is settled before new mail comes.
                    await tg.start(outbox.run)
                timers = TimerLoop(store, metrics=metrics)
                # One keeper of dead letters for the wire side and the mail
                # ingress: one table, one set of caps, counted in /metrics.
                letters = DeadLetters(settings.wire.retention)
                start_wire = functools.partial(
                    wire or run_wire,
                    store=store,
                    transport=transport,
                    subjects=Subjects(settings.subject_prefix),
                    boot_id=boot_id,
                    config=_capped(settings.wire, settings.backoff_max),
                    outbox=outbox,
                    letters=letters,
                    metrics=metrics,
                    on_timers=timers.wake,
                    **shared,
                )
                side: WireSide = await tg.start(start_wire)
                acceptor.on_accepted = side.on_accepted
                timers.on_fired = side.on_accepted
                outbox.on_accepted = side.on_accepted  # its bounce items
                if "leases" in shared:
                    # One hub fires at a time; the conditional delete of each
                    # row keeps a fire once even while two think they do.
                    tg.start_soon(shared["leases"].with_role, "timers", timers.run)
                else:
                    await tg.start(timers.run)
                # Producers' mail over NATS: POST /mail/batch's semantics, same acceptor.
                ingress = functools.partial(
                    run_ingress,
                    store=store,
                    transport=transport,
                    subjects=Subjects(settings.subject_prefix),
                    acceptor=acceptor,
                    max_body=settings.max_body,
                    config=IngressConfig(retention=settings.wire.retention),
                    letters=letters,
                )
                await tg.start(ingress)
                # Started once the wire side is: its fires wake the dispatcher.
                scheduler = Scheduler(
                    store,
                    on_accepted=side.on_accepted,
                    backoff=Backoff().capped(settings.backoff_max),
                    idle_look=SHARED_IDLE_LOOK if store.shared else None,
                )
                if "leases" in shared:
                    # One hub at a time fires (each fire is exactly once anyway).
                    tg.start_soon(shared["leases"].with_role, "schedules", scheduler.run)
                else:
                    await tg.start(scheduler.run)
                smtp_server = None
                if settings.smtp is not None:
                    assert smtp_sock is not None
                    # Read here, not at import: aiosmtpd and the sender checks
                    # load only in a hub that serves SMTP.
                    smtp_server = smtp.SmtpServer(
                        settings.smtp,
                        smtp_sock,
                        store=store,
                        acceptor=acceptor,
                        max_body=settings.max_body,
                    )
                    await tg.start(smtp_server.run)
                api = ApiSettings(
                    domain=settings.domain,
                    domains=settings.domains,
                    # Shown (/healthz) and handed out (join tokens): never
                    # with credentials; a sidecar gets those from its operator.
                    nats_url=redact_url(settings.nats_url),
                    subject_prefix=settings.subject_prefix,
                    sidecar_root=settings.sidecar_root,
                    max_body=settings.max_body,
                    environ=settings.environ,
                )
                # The live event stream's reader; closed before the HTTP server
                # stops, so open streams end at once instead of holding it.
                feed = ChangeFeed(store, settings.events, deployment_extra=side.deployment_health)
                await tg.start(feed.run)
                app = create_app(
                    store=store,
                    acceptor=acceptor,
                    settings=api,
                    admin_token=admin_token,
                    boot_id=boot_id,
                    health_extra=side.health,
                    deployment_extra=side.deployment_health,
                    on_deleted=functools.partial(_deleted, side, metrics),
                    on_rollout=side.on_rollout,
                    on_policy=side.on_policy,
                    on_schedules=scheduler.wake,
                    metrics_extra=lambda: side.metrics() + metrics.render() + scheduler.render(),
                    events=feed,
                    wakes=side.wakes_after,
                )
                http = HttpServer(app, sock, settings.http_limits, fast_path=mail_answers(app))
                await tg.start(http.run)
                nats = redact_url(settings.nats_url)
                smtp_address = str(smtp_server.address) if smtp_server is not None else None
                log.info(
                    "hub ready boot_id=%s http=%s nats=%s smtp=%s loop=%s",
                    boot_id,
                    http_url,
                    nats,
                    smtp_address or "-",
                    running_loop(),
                )
                task_status.started(HubHandle(boot_id, http_url, store, acceptor, smtp_address))
                # Serve until a signal (with handle_signals) or the caller cancels.
                try:
                    async with cancel_on_signals() if handle_signals else nullcontext():
                        await anyio.sleep_forever()
                finally:
                    # Long polls end at once, whichever way the hub stops: the
                    # HTTP server's graceful stop would wait for them (2 s).
                    side.close_polls()
                # Stop intake first, so requests in flight still find the
                # acceptor; then everything else.
                feed.close()
                await http.shutdown()
                if smtp_server is not None:
                    await smtp_server.shutdown()
                tg.cancel_scope.cancel()
    finally:
        sock.close()
        if smtp_sock is not None:
            smtp_sock.close()
        log.info("hub stopped boot_id=%s", boot_id)


def _deleted(side: WireSide, metrics: HubMetrics, deployment_id: str) -> object:
    metrics.forget(deployment_id)
    return side.on_deleted(deployment_id)


def _capped(wire: WireConfig, backoff_max: float | None) -> WireConfig:
    dispatch = dataclasses.replace(wire.dispatch, backoff=wire.dispatch.backoff.capped(backoff_max))
    return dataclasses.replace(wire, dispatch=dispatch)


def run_hub(settings: HubSettings) -> None:
    """Run the hub in this process until SIGTERM/SIGINT (``mailrun hub``,
    ``python -m hub``), its settings read (and its log set up) by then."""
    try:
        # An earlier release wrote 0644 files in a 0755 dir; `up` walks the
        # whole state dir, the hub its own top level (hub.db and its WAL).
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        make_private(settings.state_dir, recursive=False)
        tracing.setup("mailrun-hub", settings.environ)
        anyio.run(
            functools.partial(serve_hub, settings, handle_signals=True),
            backend_options=dict(settings.process.backend_options),
        )
    except (HubError, OSError) as exc:
        log.error("hub failed: %s", exc)
        raise SystemExit(1) from exc
    finally:
        tracing.shutdown()  # what is buffered goes out before the process does
