"""The Wire: the wire side as the rest of the hub holds it, told what the
acceptor, the API and the store's changes did (``on_*``), asked for wakes
and for health and metrics, which its :class:`~hub.wire.reports.WireReports`
renders."""

from __future__ import annotations

from typing import Any

from runtime import Reason

from .delivery import Dispatcher, HealthConfig, PolicyDriver, RolloutDriver
from .notices import Notices
from .reports import WireReports
from .retention import DeadLetters
from .sessions import LeaseKeeper, SessionTable


class Wire:
    """What the rest of the hub sees of the wire side."""

    def __init__(
        self,
        sessions: SessionTable,
        dispatcher: Dispatcher,
        notices: Notices,
        health: HealthConfig | None = None,
        letters: DeadLetters | None = None,
        rollouts: RolloutDriver | None = None,
        leases: LeaseKeeper | None = None,
        policies: PolicyDriver | None = None,
    ) -> None:
        self.sessions = sessions
        self._policies = policies
        self.dispatcher = dispatcher
        self._rollouts = rollouts
        self._notices = notices
        self._letters = letters or DeadLetters()
        self._reports = WireReports(
            sessions, dispatcher, health or HealthConfig(), self._letters, leases
        )

    def health(self) -> dict[str, Any]:
        """``GET /health``'s wire part."""
        return self._reports.health()

    def deployment_health(self, deployment_id: str) -> dict[str, Any]:
        """:meth:`WireReports.deployment_health`: ``connected``, ``last_error``, ``stuck``."""
        return self._reports.deployment_health(deployment_id)

    def local_health(self, deployment_id: str) -> dict[str, Any]:
        """:meth:`deployment_health` from this hub's own memory."""
        return self._reports.local_health(deployment_id)

    def metrics(self) -> str:
        """``GET /metrics``'s wire part (Prometheus text)."""
        return self._reports.metrics()

    def on_accepted(self, deployment_ids: set[str]) -> None:
        """The acceptor committed dispatches for these deployments."""
        self.dispatcher.wake(deployment_ids)

    def on_rollout(self, deployment_id: str) -> None:
        """A version was asked for: its sidecar is asked to load it now (an
        asleep one's wake was requested in that transaction)."""
        if self._rollouts is not None:
            self._rollouts.poke()
        self.dispatcher.sleepers.poke((deployment_id,))

    async def wakes(self, wait: float) -> list[str]:
        """``GET /workflows/wakes``: the asleep deployments that have work,
        waiting up to ``wait`` seconds for one."""
        return await self.dispatcher.sleepers.wakes(wait)

    async def wakes_after(self, wait: float, cursor: str | None) -> tuple[list[str], str]:
        """``GET /workflows/wakes?cursor=``: as :meth:`wakes`, answering at
        once only with news since the answer that gave ``cursor``; and the
        answer's cursor."""
        return await self.dispatcher.sleepers.wakes_after(wait, cursor)

    def close_polls(self) -> None:
        """The hub is stopping: the wakes' long polls answer now (empty)."""
        self.dispatcher.sleepers.close()

    def on_policy(self, deployment_id: str) -> None:
        """The deployment's failure policy changed: its sidecar is told now."""
        if self._policies is not None:
            self._policies.changed(deployment_id)

    def policy_owed(self, deployment_id: str) -> str | None:
        """The session still owed the deployment's changed policy, if any."""
        return self._policies.owed(deployment_id) if self._policies is not None else None

    def on_deleted(self, deployment_id: str) -> None:
        """The deployment was deleted (its epoch bumped in that transaction):
        its sessions end now, its sidecar is told, and what memory held for
        it goes."""
        self.sessions.drop(deployment_id)
        self.dispatcher.forget(deployment_id)
        self.dispatcher.sleepers.woke(deployment_id)
        self._letters.forget(deployment_id)
        self._notices.fenced(deployment_id, 0, Reason.DEPLOYMENT_NOT_LIVE)
