"""What the wire side reports from memory: the hub's health, a deployment's
(``connected``, ``last_error``, ``stuck``), and the wire's part of
``GET /metrics`` (redeliveries, dead letters, per-deployment gauges)."""

from __future__ import annotations

from typing import Any

from ..metrics import family, label
from .delivery import Dispatcher, HealthConfig, health_report, redelivery_metrics, stuck_report
from .retention import DeadLetters
from .sessions import LeaseKeeper, SessionTable


class WireReports:
    """What :class:`~hub.wire.front.Wire` tells the API, rendered from the
    sessions, the dispatcher and the dead letters (and, with several hubs,
    the leases' view of the others)."""

    def __init__(
        self,
        sessions: SessionTable,
        dispatcher: Dispatcher,
        health: HealthConfig,
        letters: DeadLetters,
        leases: LeaseKeeper | None = None,
    ) -> None:
        self._sessions = sessions
        self._dispatcher = dispatcher
        self._health = health
        self._letters = letters
        self._leases = leases

    def health(self) -> dict[str, Any]:
        dispatcher = self._dispatcher
        return health_report(
            self._sessions,
            dispatcher.stats(),
            self._health,
            dispatcher.redelivered(),
            asleep=dispatcher.sleepers,
        )

    def deployment_health(self, deployment_id: str) -> dict[str, Any]:
        """What a deployment's JSON adds from memory: ``connected``,
        ``last_error``, ``stuck`` (its dispatches that stay unprocessed).
        Several hubs: the view of the hub that serves the deployment, as its
        last lease round recorded it (at most a second old)."""
        leases = self._leases
        if leases is not None and not leases.serves(deployment_id):
            view = leases.health_of(deployment_id) or {}
            return {
                "connected": bool(view.get("connected", False)),
                "last_error": view.get("last_error"),
                "stuck": int(view.get("stuck", 0)),
            }
        return self.local_health(deployment_id)

    def local_health(self, deployment_id: str) -> dict[str, Any]:
        """:meth:`deployment_health` from this hub's own memory."""
        silence = self._sessions.silence(deployment_id)
        stuck = stuck_report(self._dispatcher.redelivered(deployment_id), self._health)
        return {
            "connected": silence is not None and silence < self._health.stale_after,
            "last_error": self._dispatcher.last_error(deployment_id),
            "stuck": stuck[0]["count"] if stuck else 0,
        }

    def metrics(self) -> str:
        """``GET /metrics``'s wire part (Prometheus text)."""
        stuck = stuck_report(self._dispatcher.redelivered(), self._health)
        stuck_count = sum(s["count"] for s in stuck)
        return (
            redelivery_metrics(self._dispatcher.redelivered_total, stuck_count)
            + self._letters.metrics()
            + self._gauges()
        )

    def _gauges(self) -> str:
        """Per deployment: what waits (the census's, at most a second old) and
        whether its sidecar answers."""
        pending = self._dispatcher.stats()["pending"]
        stale = self._health.stale_after
        sidecars = {
            session.deployment_id: (silence := self._sessions.silence(session.deployment_id))
            is not None
            and silence < stale
            for session in self._sessions.all_current()
        }
        dep = [("{" + label("deployment", d) + "}", p) for d, p in sorted(pending.items())]
        lines = family(
            "mailrun_deployment_pending", "gauge", "Dispatches reserved, not yet delivered.",
            [(labels, p["count"]) for labels, p in dep],
        )  # fmt: skip
        lines += family(
            "mailrun_deployment_oldest_pending_seconds", "gauge",
            "Age of the deployment's oldest reserved dispatch.",
            [(labels, p["oldest_age"]) for labels, p in dep],
        )  # fmt: skip
        lines += family(
            "mailrun_sidecar_connected", "gauge",
            "1 while the deployment's sidecar session answers, else 0.",
            [("{" + label("deployment", d) + "}", int(up)) for d, up in sorted(sidecars.items())],
        )  # fmt: skip
        return "\n".join(lines) + "\n"
