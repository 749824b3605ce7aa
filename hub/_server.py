"""The hub process: store, acceptor, NATS wire side and mail ingress, outbound
relay, SMTP ingress and HTTP API in one task group.

Shutdown is orderly: on SIGTERM/SIGINT (or cancellation) the HTTP server
stops taking requests and finishes the ones in flight (bounded), the SMTP
server answers the messages it is accepting (bounded) and closes, then the
acceptor and the wire side are cancelled and the store is closed. Nothing
accepted is lost at any point: an answer "accepted" is only ever sent after
its transaction committed.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AsyncExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc

from runtime import (
    DEFAULT_HTTP_PORT,
    DEFAULT_LOG_LEVEL,
    DEFAULT_MAIL_DOMAIN,
    DEFAULT_MAX_BODY,
    DEFAULT_NATS_URL,
    DEFAULT_SUBJECT_PREFIX,
    LOG_LEVEL_ENV,
    LOOPBACK,
    HostPort,
    Subjects,
    Transport,
    backoff_max_from_env,
    cancel_on_signals,
    check_failpoints,
    loop_options,
    make_private,
    new_id,
    open_nats,
    parse_host_port,
    private_umask,
    redact_url,
    running_loop,
    sqlite_synchronous,
)

from ._errors import HubError
from ._token import ensure_admin_token, read_token_file
from .api import (
    ApiSettings,
    ChangeFeed,
    EventLimits,
    HttpLimits,
    HttpServer,
    bind_socket,
    create_app,
    mail_answers,
)
from .intake import Acceptor
from .metrics import HubMetrics
from .natsauth import hub_seed
from .outbound import Outbox, RelayConfig, relay_config
from .smtp import SmtpConfig, SmtpServer, smtp_config
from .store import DEFAULT_BUSY_TIMEOUT, Store, give_nats_identities, open_store
from .wire import (
    DeadLetters,
    DispatchConfig,
    IngressConfig,
    LeaseKeeper,
    RetentionConfig,
    WireConfig,
    hub_identity,
    run_ingress,
    run_wire,
)

log = logging.getLogger("mailrun.hub")


@dataclass(frozen=True)
class HubConfig:
    state_dir: Path
    http_host: str = LOOPBACK
    http_port: int = DEFAULT_HTTP_PORT  # 0: any free port (see HubHandle.http_url)
    nats_url: str = DEFAULT_NATS_URL
    sidecar_root: Path | None = None
    subject_prefix: str = DEFAULT_SUBJECT_PREFIX
    domain: str = DEFAULT_MAIL_DOMAIN
    max_body: int = DEFAULT_MAX_BODY
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    wire: WireConfig = field(default_factory=WireConfig)
    # None: the state dir's admin-token file, created at the first start.
    admin_token: str | None = field(default=None, repr=False)
    http_limits: HttpLimits = field(default_factory=HttpLimits)
    events: EventLimits = field(default_factory=EventLimits)
    """``GET /events``: streams at once, each one's buffer, the poll interval."""
    backoff_max: float | None = None
    """Caps the delays of the hub's retry loops (NATS, delivery rounds, the
    relay): how tests and soaks compress time (``MAILRUN_BACKOFF_MAX``)."""
    relay: RelayConfig | None = None
    """Where mail to outside addresses goes (None: it stays ``no_relay``)."""
    smtp: SmtpConfig | None = None
    """The SMTP ingress (``--smtp``); None: no SMTP server."""
    database: str | None = field(default=None, repr=False)
    """A ``postgresql://`` URL (``--database``); None: ``state_dir/hub.db``.
    Not in ``repr``: it may carry a password."""


class WireSide(Protocol):
    """What the hub needs from the started wire side (``hub.wire.service.Wire``)."""

    def on_accepted(self, deployment_ids: set[str]) -> object: ...

    def on_deleted(self, deployment_id: str) -> object: ...

    def on_rollout(self, deployment_id: str) -> object: ...

    def health(self) -> Mapping[str, Any]: ...

    def deployment_health(self, deployment_id: str) -> Mapping[str, Any]: ...

    def metrics(self) -> str: ...


WireFactory = Callable[..., Coroutine[Any, Any, None]]
"""``run_wire``-shaped: keyword arguments store, transport, subjects, boot_id,
config, outbox, letters, metrics, task_status; reports a :class:`WireSide` through
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
    config: HubConfig,
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
    admin_token = config.admin_token
    if admin_token is None:
        admin_token = (await anyio.to_thread.run_sync(ensure_admin_token, config.state_dir))[0]
    sock = bind_socket(config.http_host, config.http_port)
    host, port = sock.getsockname()[:2]
    http_url = f"http://{HostPort(host, port)}"
    smtp_sock = None
    try:
        if config.smtp is not None:
            # Bound up front too: a port clash stops the hub before it starts anything.
            smtp_sock = bind_socket(config.smtp.host, config.smtp.port)
        async with AsyncExitStack() as stack:
            store = await open_store(
                config.database or config.state_dir / "hub.db", busy_timeout=config.busy_timeout
            )
            stack.push_async_callback(store.aclose)
            if config.sidecar_root is not None:
                await give_nats_identities(store, config.sidecar_root)
            if transport is None:
                # Its own NATS identity, whether or not the server asks for one.
                seed = await anyio.to_thread.run_sync(hub_seed, config.state_dir)
                transport = await stack.enter_async_context(
                    open_nats(
                        config.nats_url,
                        name=f"mailrun-hub-{boot_id}",
                        seed=seed,
                        backoff_max=config.backoff_max,
                    )
                )
            metrics = HubMetrics()

            async def reconnected() -> None:
                metrics.nats_reconnects.inc()

            transport.on_reconnect(reconnected)
            async with anyio.create_task_group() as tg:
                acceptor = Acceptor(store, metrics=metrics)
                await tg.start(acceptor.run)
                outbox = Outbox(store, config.relay, backoff_max=config.backoff_max)
                # On PostgreSQL, hubs share the deployments by lease: a second
                # hub on the same database joins by starting (docs/scaling.md).
                shared: dict[str, Any] = {}
                if store.dialect == "postgresql":
                    hub_id = await anyio.to_thread.run_sync(hub_identity, config.state_dir)
                    leases = shared["leases"] = LeaseKeeper(store, hub_id, http_url=http_url)
                    # One hub at a time relays: another's "sending" rows are
                    # not left over from a crash.
                    tg.start_soon(leases.with_role, "relay", outbox.run)
                else:
                    # Before the wire: what the last hub left is settled before new mail comes.
                    await tg.start(outbox.run)
                # One keeper of dead letters for the wire side and the mail
                # ingress: one table, one set of caps, counted in /metrics.
                letters = DeadLetters(config.wire.retention)
                start_wire = functools.partial(
                    wire or run_wire,
                    store=store,
                    transport=transport,
                    subjects=Subjects(config.subject_prefix),
                    boot_id=boot_id,
                    config=_capped(config.wire, config.backoff_max),
                    outbox=outbox,
                    letters=letters,
                    metrics=metrics,
                    **shared,
                )
                side: WireSide = await tg.start(start_wire)
                acceptor.on_accepted = side.on_accepted
                # Producers' mail over NATS: POST /mail/batch's semantics, same acceptor.
                ingress = functools.partial(
                    run_ingress,
                    store=store,
                    transport=transport,
                    subjects=Subjects(config.subject_prefix),
                    acceptor=acceptor,
                    max_body=config.max_body,
                    config=IngressConfig(retention=config.wire.retention),
                    letters=letters,
                )
                await tg.start(ingress)
                smtp = None
                if config.smtp is not None:
                    assert smtp_sock is not None
                    smtp = SmtpServer(
                        config.smtp,
                        smtp_sock,
                        store=store,
                        acceptor=acceptor,
                        max_body=config.max_body,
                    )
                    await tg.start(smtp.run)
                settings = ApiSettings(
                    domain=config.domain,
                    # Shown (/healthz) and handed out (join tokens): never
                    # with credentials; a sidecar gets those from its operator.
                    nats_url=redact_url(config.nats_url),
                    subject_prefix=config.subject_prefix,
                    sidecar_root=config.sidecar_root,
                    max_body=config.max_body,
                )
                # The live event stream's reader; closed before the HTTP server
                # stops, so open streams end at once instead of holding it.
                feed = ChangeFeed(store, config.events, deployment_extra=side.deployment_health)
                await tg.start(feed.run)
                app = create_app(
                    store=store,
                    acceptor=acceptor,
                    settings=settings,
                    admin_token=admin_token,
                    boot_id=boot_id,
                    health_extra=side.health,
                    deployment_extra=side.deployment_health,
                    on_deleted=functools.partial(_deleted, side, metrics),
                    on_rollout=side.on_rollout,
                    metrics_extra=lambda: side.metrics() + metrics.render(),
                    events=feed,
                )
                http = HttpServer(app, sock, config.http_limits, lane=mail_answers(app))
                await tg.start(http.run)
                nats = redact_url(config.nats_url)
                smtp_address = str(smtp.address) if smtp is not None else None
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
                async with cancel_on_signals() if handle_signals else nullcontext():
                    await anyio.sleep_forever()
                # Stop intake first, so requests in flight still find the
                # acceptor; then everything else.
                feed.close()
                await http.shutdown()
                if smtp is not None:
                    await smtp.shutdown()
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


def configure_logging() -> None:
    """One line per event on stderr; level from ``MAILRUN_LOG_LEVEL`` (INFO)."""
    level = os.environ.get(LOG_LEVEL_ENV, DEFAULT_LOG_LEVEL).upper()
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def run_hub_cli(
    *,
    state_dir: Path,
    http: str,
    nats_url: str,
    sidecar_root: Path | None = None,
    subject_prefix: str | None = None,
    domain: str | None = None,
    max_body: int | None = None,
    redeliver_after: float | None = None,
    run_history: int | None = None,
    token_file: Path | None = None,
    smtp_relay: str | None = None,
    smtp: str | None = None,
    smtp_cert: Path | None = None,
    smtp_key: Path | None = None,
    database: str | None = None,
) -> None:
    """Run the hub in this process until SIGTERM/SIGINT (``mailrun hub``, ``python -m hub``).

    The admin token is ``token_file``'s, else the state dir's (created at the
    first start); a hub that cannot read its token does not start."""
    private_umask()
    configure_logging()
    host, port = parse_host_port(http, allow_port_zero=True)
    try:
        check_failpoints()
        backoff_max = backoff_max_from_env(os.environ)
        sqlite_synchronous(os.environ, warn=True)
        loop = loop_options(os.environ)
        admin_token = read_token_file(Path(token_file)) if token_file is not None else None
        relay = relay_config(smtp_relay, os.environ) if smtp_relay else None
        ingress_smtp = (
            smtp_config(
                smtp, os.environ, cert_file=smtp_cert, key_file=smtp_key, allow_port_zero=True
            )
            if smtp
            else None
        )
    except (HubError, ValueError) as exc:
        log.error("hub failed: %s", exc)
        raise SystemExit(1) from exc
    config = HubConfig(
        state_dir=Path(state_dir),
        http_host=host,
        http_port=port,
        nats_url=nats_url,
        sidecar_root=Path(sidecar_root) if sidecar_root is not None else None,
        subject_prefix=subject_prefix or DEFAULT_SUBJECT_PREFIX,
        domain=domain or DEFAULT_MAIL_DOMAIN,
        max_body=max_body or DEFAULT_MAX_BODY,
        admin_token=admin_token,
        backoff_max=backoff_max,
        relay=relay,
        smtp=ingress_smtp,
        database=database,
    )
    if redeliver_after is not None:
        dispatch = DispatchConfig(redeliver_after=redeliver_after)
        config = dataclasses.replace(config, wire=WireConfig(dispatch=dispatch))
    if run_history is not None:
        retention = RetentionConfig(run_history=run_history)
        config = dataclasses.replace(
            config, wire=dataclasses.replace(config.wire, retention=retention)
        )
    try:
        # An earlier release wrote 0644 files in a 0755 dir; `up` walks the
        # whole state dir, the hub its own top level (hub.db and its WAL).
        config.state_dir.mkdir(parents=True, exist_ok=True)
        make_private(config.state_dir, recursive=False)
        anyio.run(functools.partial(serve_hub, config, handle_signals=True), backend_options=loop)
    except (HubError, OSError) as exc:
        log.error("hub failed: %s", exc)
        raise SystemExit(1) from exc
