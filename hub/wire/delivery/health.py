"""Health that tells the truth: which sidecars answer, which deployments are stuck.

NATS request/reply has no disconnect signal, and a sidecar that is stopped
(SIGSTOP, a wedged event loop, a cut network) keeps its NATS connection and
its subscriptions until the server's own pings give up, minutes later. So a
sidecar is judged by exchanges, not by its connection: it counts as
connected while the last successful exchange of its deployment's current
session (a hello, an events, blob or mint request that passed the session
check, an answer to a ``MailInbound``) is less than ``stale_after`` old.

An idle sidecar has no exchanges of its own, so the :class:`Prober` sends it
a ``Ping`` after ``probe_after`` of silence, on its inbound subject. The
sidecar answers ``Pong`` from its delivery loop without touching its inbox,
so the probe costs one round trip and exercises the very path deliveries
take: a wedged delivery loop shows as silence.

A sidecar that answers but never processes shows in what the dispatcher had
to send again (:mod:`hub.wire.delivery.redelivery`): a dispatch re-sent
``stuck_resends`` times and still not processed is reported stuck.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from runtime import (
    Ack,
    FrameDecodeError,
    FrameDecoder,
    Ping,
    Pong,
    Refused,
    Subjects,
    Transport,
    TransportError,
    encode,
)

from ..sessions import Session, SessionTable
from .redelivery import Resent

log = logging.getLogger("mailrun.hub.health")


@dataclass(frozen=True)
class HealthConfig:
    stale_after: float = 5.0
    """A sidecar silent this long (seconds) is reported disconnected."""
    probe_after: float = 2.0
    """A sidecar silent this long is probed."""
    probe_timeout: float = 1.0
    undeliverable_after: float = 10.0
    """A deployment whose oldest undelivered dispatch waited this long is undeliverable."""
    failed_rounds: int = 3
    """... and so is one whose last this many delivery passes all failed
    (a pass ends at its first failed frame, docs/wire.md)."""
    max_probes: int = 64
    """Probes in flight at once."""
    stuck_resends: int = 3
    """A dispatch sent again this many times for not being processed, and
    still not processed, is stuck."""


class Prober:
    """Probes every current session that has been silent for ``probe_after``."""

    def __init__(
        self,
        *,
        transport: Transport,
        subjects: Subjects,
        sessions: SessionTable,
        on_answer: Callable[[str], None],
        config: HealthConfig | None = None,
    ) -> None:
        self._transport = transport
        self._subjects = subjects
        self._sessions = sessions
        self._on_answer = on_answer
        self._config = config or HealthConfig()
        self._probing: set[str] = set()
        # Any answer proves life: Pong, or an older sidecar's refusal.
        self._replies: FrameDecoder[Pong | Ack | Refused] = FrameDecoder(Pong | Ack | Refused)

    async def run(self) -> None:
        config = self._config
        interval = min(1.0, config.probe_after / 2)
        async with anyio.create_task_group() as tg:
            while True:
                for session in self._sessions.all_current():
                    dep = session.deployment_id
                    silence = self._sessions.silence(dep)
                    if dep in self._probing or (silence or 0.0) < config.probe_after:
                        continue
                    if len(self._probing) >= config.max_probes:
                        break
                    self._probing.add(dep)
                    tg.start_soon(self._probe, session)
                await anyio.sleep(interval)

    async def _probe(self, session: Session) -> None:
        dep = session.deployment_id
        try:
            data = await self._transport.request(
                self._subjects.inbound(dep),
                encode(Ping(session_id=session.session_id)),
                self._config.probe_timeout,
            )
            self._replies.decode(data)
        except (TimeoutError, TransportError, FrameDecodeError):
            return  # the growing silence is the report
        except Exception:
            # A probe is an observer: whatever goes wrong, it must not take
            # the wire side down with it.
            log.exception("probing the sidecar of %s failed", dep)
            return
        finally:
            self._probing.discard(dep)
        self._sessions.seen(dep)
        self._on_answer(dep)


def health_report(
    sessions: SessionTable,
    dispatch: Mapping[str, Any],
    config: HealthConfig,
    resent: Iterable[Resent] = (),
    *,
    asleep: Container[str] = (),
) -> dict[str, Any]:
    """``/healthz``'s wire part from the session table, ``Dispatcher.stats()``
    and ``Dispatcher.redelivered()``. An ``asleep`` deployment has no session
    and is no silent sidecar; its dispatches that wait past
    ``undeliverable_after`` are undeliverable all the same (nobody woke it)."""
    now = time.time()
    pending: Mapping[str, Any] = dispatch.get("pending", {})
    lanes: Mapping[str, Any] = dispatch.get("lanes", {})
    rows: list[dict[str, Any]] = []
    for s in sorted(sessions.all_current(), key=lambda s: s.deployment_id):
        silence = sessions.silence(s.deployment_id)
        rows.append(
            {
                "deployment_id": s.deployment_id,
                "session_id": s.session_id,
                "instance_id": s.instance_id,
                "owner_epoch": s.owner_epoch,
                "since": s.opened_at,
                "last_seen": None if silence is None else round(now - silence, 3),
                "silence": None if silence is None else round(silence, 3),
                "connected": silence is not None and silence < config.stale_after,
            }
        )
    by_dep = {row["deployment_id"]: row for row in rows}
    undeliverable = []
    for dep, waiting in sorted(pending.items()):
        lane = lanes.get(dep, {})
        error = _stuck(waiting, by_dep.get(dep), lane, config)
        if error is not None and dep in asleep:
            error = "asleep: not woken yet"
        if error is not None:
            undeliverable.append(
                {
                    "deployment_id": dep,
                    "pending": waiting["count"],
                    "oldest_wait": waiting["oldest_age"],
                    "connected": bool(by_dep.get(dep, {}).get("connected")),
                    "last_error": error,
                }
            )
    connected = sum(1 for row in rows if row["connected"])
    stuck = stuck_report(resent, config, now)
    return {
        "status": "degraded" if undeliverable or stuck else "ok",
        "connected_sidecars": connected,
        "disconnected_sidecars": len(rows) - connected,
        "sessions": rows,
        **dispatch,
        "undeliverable": undeliverable,
        "stuck": stuck,
    }


def stuck_report(
    resent: Iterable[Resent], config: HealthConfig, now: float | None = None
) -> list[dict[str, Any]]:
    """Per deployment, its dispatches sent again ``stuck_resends`` times and
    still not processed: how many, and the lowest in seq order (the sidecar
    takes them in that order, so that one holds the others back)."""
    now = time.time() if now is None else now
    heads: dict[str, Resent] = {}
    counts: dict[str, int] = {}
    for entry in resent:
        if entry.times < config.stuck_resends:
            continue
        dep = entry.deployment_id
        counts[dep] = counts.get(dep, 0) + 1
        if dep not in heads or entry.seq < heads[dep].seq:
            heads[dep] = entry
    return [
        {
            "deployment_id": dep,
            "count": counts[dep],
            "dispatch_id": head.dispatch_id,
            "seq": head.seq,
            "redelivered": head.times,
            "stuck_for": round(max(0.0, now - head.first_at), 3),
        }
        for dep, head in sorted(heads.items())
    ]


def _stuck(
    waiting: Mapping[str, Any],
    session: Mapping[str, Any] | None,
    lane: Mapping[str, Any],
    config: HealthConfig,
) -> str | None:
    """Why a deployment's waiting dispatches cannot be delivered now, or None."""
    if not waiting.get("count"):
        return None
    failures, lane_error = int(lane.get("failures") or 0), lane.get("last_error") or None
    if failures >= config.failed_rounds:
        return str(lane_error or "delivery rounds failing")
    if session is not None and not session["connected"]:
        return str(lane_error or f"sidecar silent for {session['silence']:.1f} s")
    if float(waiting.get("oldest_age") or 0.0) > config.undeliverable_after:
        if failures and lane_error:
            return str(lane_error)
        return "no sidecar session" if session is None else "delivery falling behind"
    return None


def redelivery_metrics(redelivered_total: int, stuck: int) -> str:
    """The wire side's families for ``GET /metrics`` (Prometheus text)."""
    families = [
        ("mailrun_dispatch_redelivered_total", "counter",
         "Delivered dispatches sent again because they were not processed in time"
         " (since the hub started).", redelivered_total),
        ("mailrun_dispatch_stuck", "gauge",
         "Dispatches sent again stuck_resends times and still not processed.", stuck),
    ]  # fmt: skip
    lines: list[str] = []
    for name, kind, help_, value in families:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {value}"]
    return "\n".join(lines) + "\n"
