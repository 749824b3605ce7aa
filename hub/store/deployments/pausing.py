"""A deployment paused and unpaused: the ``paused_at`` of its row.

While it is set, the deployment takes every trigger as before (each is
accepted and kept) and the dispatcher delivers none of them
(``delivery.sending.load_reserved`` loads nothing for it); what its sidecar
had been given already is processed. Its waiting dispatches are not
undeliverable, and its delivered ones not overdue, meanwhile. Unpaused,
everything it kept goes out in seq order. Both are idempotent: a pause of a
paused deployment keeps the time of the first.
"""

from __future__ import annotations

import time

from runtime.wire import anchor_is_live

from ..._errors import DeploymentNotLive, UnknownDeployment
from ..sql import Tx, sql

_LIVE = sql(
    "SELECT a.status FROM deployment d JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1"
    " WHERE d.id = ?"
)
_PAUSE = sql(
    "UPDATE deployment SET paused_at = ? WHERE id = ? AND deleted_at IS NULL AND paused_at IS NULL"
)
_UNPAUSE = sql("UPDATE deployment SET paused_at = NULL WHERE id = ? AND paused_at IS NOT NULL")
_PAUSED = sql(
    "SELECT id FROM deployment WHERE paused_at IS NOT NULL AND deleted_at IS NULL ORDER BY id"
)


def _check_live(tx: Tx, deployment_id: str) -> None:
    row = tx.fetch_one(_LIVE, (deployment_id,))
    if row is None:
        raise UnknownDeployment(f"no deployment {deployment_id!r}")
    if not anchor_is_live(str(row["status"])):
        raise DeploymentNotLive(f"deployment {deployment_id} is deleted")


def pause_deployment(tx: Tx, deployment_id: str) -> bool:
    """Inside a write transaction: pause a live deployment; whether it was
    not paused before."""
    _check_live(tx, deployment_id)
    return tx.execute(_PAUSE, (time.time(), deployment_id)) == 1


def unpause_deployment(tx: Tx, deployment_id: str) -> bool:
    """Inside a write transaction: unpause a live deployment; whether it was
    paused."""
    _check_live(tx, deployment_id)
    return tx.execute(_UNPAUSE, (deployment_id,)) == 1


def paused_deployments(tx: Tx) -> list[str]:
    """The ids of the live deployments that are paused."""
    return [str(row["id"]) for row in tx.fetch_all(_PAUSED)]
