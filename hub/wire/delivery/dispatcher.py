"""The outbox sender: one lane per deployment with a sidecar session.

A lane keeps a sliding window of frames on the wire (:mod:`hub.wire.delivery.window`)
while its deployment has reserved dispatches, sleeps on a
:class:`~runtime.Wakeup` when it has none (bursts of wakeups coalesce into
one load), and backs off with jitter after a frame fails. A new hello cuts
the backoff short: the sidecar is back.
Rows are never removed from the queue by the sender, only marked, so a
dispatch is never skipped or lost whatever the bus does. A sweep
(:mod:`hub.wire.delivery.redelivery`) puts a dispatch delivered but not processed
within ``redeliver_after`` back in that queue and wakes its lane.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.abc

from runtime import Backoff, Retry, Subjects, Transport
from runtime.config import DEFAULT_REDELIVER_AFTER

from ...metrics import HubMetrics
from ...store import ReservedCount, Store, count_reserved, find_overdue, still_open
from ..sessions import Session, SessionTable, Sleepers
from .marks import DEFAULT_MARK_WAIT, Marks
from .redelivery import Redeliveries, Resent, send_again
from .window import Lane, PassEnd, Sending, Window

log = logging.getLogger("mailrun.hub.dispatch")


@dataclass(frozen=True)
class DispatchConfig:
    window: int = 512
    """Dispatches a lane has sent and not settled at most (docs/performance-notebook.md)."""
    frame_items: int = 128
    """Dispatches per MailBatch frame at most: a window is several frames,
    so that each settled one makes room for the next."""
    request_timeout: float = 1.0
    backoff: Backoff = Backoff(0.05, 2.0)
    """Between passes of a lane whose last frame failed."""
    census_interval: float = 1.0
    """How often pending counts are refreshed (and idle lanes with work woken),
    and overdue deliveries looked for."""
    redeliver_after: float = DEFAULT_REDELIVER_AFTER
    """A dispatch delivered this long ago (seconds) and not processed is sent
    again; only the ``redeliver_window`` seqs from each deployment's lowest
    open one are looked at (:mod:`hub.wire.delivery.redelivery`)."""
    redeliver_window: int = 64
    """What a slow handler's head costs per bound: at most this many frames
    sent again."""
    mark_wait: float | None = DEFAULT_MARK_WAIT
    """Seconds an ack's ``delivered`` mark waits to be written with its
    deployment's events (:mod:`hub.wire.delivery.marks`); None: each settle
    writes its own."""
    redelivery_memory: int = 10_000
    """Re-sent, unprocessed dispatches remembered for health (oldest forgotten first)."""


class Dispatcher:
    def __init__(
        self,
        *,
        store: Store,
        transport: Transport,
        subjects: Subjects,
        sessions: SessionTable,
        config: DispatchConfig | None = None,
        metrics: HubMetrics | None = None,
        sleepers: Sleepers | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self.sleepers = sleepers or Sleepers(store)
        """The asleep deployments: every wake pokes them."""
        self._transport = transport
        self._subjects = subjects
        self._sessions = sessions
        self._config = config = config or DispatchConfig()
        self._delays = config.backoff
        self._lanes: dict[str, Lane] = {}
        self.marks = None if config.mark_wait is None else Marks(config.mark_wait)
        """The acks held for the events' transaction (the events handler takes them)."""
        self._sending = Sending(
            store=store,
            transport=transport,
            subjects=subjects,
            sessions=sessions,
            window=config.window,
            frame_items=config.frame_items,
            request_timeout=config.request_timeout,
            metrics=metrics,
            marks=self.marks,
        )
        self._pending: dict[str, ReservedCount] = {}
        self._redeliveries = Redeliveries(config.redelivery_memory)
        self._tg: anyio.abc.TaskGroup | None = None

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Own every lane's task until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._census)
            tg.start_soon(self._sweep)
            task_status.started()

    def wake(self, deployment_ids: Iterable[str]) -> None:
        """New reserved dispatches exist: lanes that sleep take another round,
        and an asleep deployment's are the news of ``GET /workflows/wakes``.
        Every accept of the hub comes here once it committed."""
        for dep in deployment_ids:
            lane = self._lanes.get(dep)
            if lane is not None:
                lane.poke()
            if dep in self.sleepers:
                self.sleepers.poke((dep,))

    def asleep(self, deployment_id: str) -> None:
        """Its Sleep was granted (its session ended already): its lane ends
        its pass and stays idle until a Welcome; nothing is sent again."""
        lane = self._lanes.get(deployment_id)
        if lane is not None:
            lane.wake.set()
            lane.kick.set()
        self._pending.pop(deployment_id, None)
        self._redeliveries.forget(deployment_id)

    def session_opened(self, session: Session) -> None:
        """A sidecar said hello: send at once, cutting any backoff short."""
        lane = self._lanes.setdefault(
            session.deployment_id, Lane(session.deployment_id, retry=Retry(self._delays))
        )
        lane.retry.succeeded()
        lane.kick.set()
        lane.poke()
        self._ensure_running(lane)

    def forget(self, deployment_id: str) -> None:
        """The deployment was deleted (its sessions are dropped already): its
        lane stops and leaves, with what was remembered of its re-sends."""
        lane = self._lanes.pop(deployment_id, None)
        if lane is not None:
            lane.wake.set()  # a sleeping lane looks again, finds no session, ends
            lane.kick.set()
        self._pending.pop(deployment_id, None)
        self._redeliveries.forget(deployment_id)

    def answered(self, deployment_id: str) -> None:
        """The deployment's sidecar answered a probe: a lane backing off retries now."""
        lane = self._lanes.get(deployment_id)
        if lane is not None and lane.retry.failures:
            lane.kick.set()

    def last_error(self, deployment_id: str) -> str | None:
        """Why the deployment's latest delivery rounds failed; None while they succeed."""
        lane = self._lanes.get(deployment_id)
        if lane is None or not lane.retry.failures:
            return None
        return lane.last_error or "delivery failed"

    def redelivered(self, deployment_id: str | None = None) -> list[Resent]:
        """Dispatches re-sent and not processed since (of one deployment, or all)."""
        if deployment_id is not None:
            return self._redeliveries.of(deployment_id)
        return list(self._redeliveries)

    @property
    def redelivered_total(self) -> int:
        """Dispatches put back for re-sending since the hub started."""
        return self._redeliveries.total

    def stats(self) -> dict[str, Any]:
        now = time.time()
        pending = {
            dep: {"count": n, "oldest_age": round(max(0.0, now - oldest), 3)}
            for dep, (n, oldest) in sorted(self._pending.items())
        }
        return {
            "pending": pending,
            "oldest_pending_age": max((p["oldest_age"] for p in pending.values()), default=0.0),
            "lanes": {
                dep: {
                    "running": lane.running,
                    "failures": lane.retry.failures,
                    "last_error": lane.last_error,
                }
                for dep, lane in sorted(self._lanes.items())
            },
        }

    def _ensure_running(self, lane: Lane) -> None:
        if not lane.running and self._tg is not None:
            lane.running = True
            self._tg.start_soon(self._drive, lane, name=f"dispatch {lane.deployment_id}")

    async def _census(self) -> None:
        while True:
            try:
                self._pending = await self._store.read(count_reserved)
                # A safety net for wakeups that never came (rows written by
                # another path): any lane with work and a session runs.
                for dep in self._pending:
                    lane = self._lanes.get(dep)
                    if lane is not None and self._sessions.current(dep) is not None:
                        self._ensure_running(lane)
                        lane.rewind()
            except Exception:
                log.exception("dispatch census failed")
            await anyio.sleep(self._config.census_interval)

    async def _sweep(self) -> None:
        while True:
            try:
                await self._redeliver()
            except Exception:
                log.exception("redelivery sweep failed")
            await anyio.sleep(self._config.census_interval)

    async def _redeliver(self) -> None:
        config, now = self._config, time.time()
        find = partial(
            find_overdue, window=config.redeliver_window, before=now - config.redeliver_after
        )
        overdue = await self._store.read(find)
        # Several hubs: each sends again only what it delivers.
        serves = self._sessions.leases.serves
        overdue = [row for row in overdue if serves(row.deployment_id)]
        resent = await send_again(self._store, overdue)
        if resent:
            self._redeliveries.record(resent, now)
            by_dep: dict[str, list[int]] = {}
            for row in resent:
                by_dep.setdefault(row.deployment_id, []).append(row.seq)
            for dep, seqs in by_dep.items():
                log.warning(
                    "%s: %d dispatch(es) delivered over %g s ago and not processed,"
                    " sending again (seq %d..%d)",
                    dep,
                    len(seqs),
                    config.redeliver_after,
                    seqs[0],
                    seqs[-1],
                )
            self.sleepers.poke(by_dep)  # reserved again: an asleep one has work
            for dep, seqs in by_dep.items():
                if (lane := self._lanes.get(dep)) is not None:
                    lane.rewind()  # below what the lane has sent
                if self._metrics is not None:
                    self._metrics.redelivered.inc(dep, len(seqs))
        if len(self._redeliveries):
            ids = self._redeliveries.ids()
            self._redeliveries.keep(await self._store.read(partial(still_open, dispatch_ids=ids)))

    async def _drive(self, lane: Lane) -> None:
        dep = lane.deployment_id
        try:
            while (session := self._sessions.current(dep)) is not None:
                lane.kick.clear()
                try:
                    end = await Window(self._sending, lane, session).run()
                except Exception as exc:
                    # One deployment's delivery never takes the hub down: a
                    # pass that fails in an unforeseen way is a failed pass.
                    log.exception("delivering to %s failed", dep)
                    lane.last_error = f"round: {type(exc).__name__}: {exc}"
                    end = PassEnd.FAILED
                if end is PassEnd.NOT_LIVE:
                    log.info("deployment %s is not live: its lane stops", dep)
                    self._sessions.drop(dep)
                    self.forget(dep)
                    return
                if end is PassEnd.FAILED:
                    await self._backoff(lane)
        finally:
            lane.running = False

    async def _backoff(self, lane: Lane) -> None:
        lane.retry.failed()
        # A fresh hello (kick) means the sidecar is back: retry at once.
        await lane.retry.wait(lane.kick.wait)
