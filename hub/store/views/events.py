"""What ``GET /events`` sends for a batch of changes: each changed row's
current JSON view, the same shapes as ``GET /dispatches/{id}``, ``GET
/runs/{id}`` and ``GET /workflows/deployments/{id}``.

A batch costs one query per kind for dispatches and runs (``IN`` over the
batch's ids), and one per deployment (its view counts its open dispatches;
deployments change seldom), all in one read of the store (``store.read``):
committed rows only, and never the writer's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

import msgspec

from ..._errors import UnknownDeployment
from ..base import Store
from ..feed import Change, ChangeKind
from ..sql import Tx, json_array
from .queries import (
    DISPATCHES_BY_ID,
    RUNS_BY_ID,
    DeploymentView,
    _run,
    dispatch_view,
    get_deployment,
)

View = dict[str, Any]


def _by_id(tx: Tx, kind: ChangeKind, ids: Sequence[str]) -> dict[str, View]:
    if not ids:
        return {}
    if kind is ChangeKind.DISPATCH:
        rows = tx.fetch_all(DISPATCHES_BY_ID, (json_array(ids),))
        return {r[0]: msgspec.to_builtins(dispatch_view(r)) for r in rows}
    rows = tx.fetch_all(RUNS_BY_ID, (json_array(ids),))
    return {r[0]: msgspec.to_builtins(_run(r)) for r in rows}


def _views(
    tx: Tx, wanted: dict[ChangeKind, list[str]]
) -> tuple[dict[tuple[str, str], View], dict[str, DeploymentView]]:
    views: dict[tuple[str, str], View] = {}
    for kind in (ChangeKind.DISPATCH, ChangeKind.RUN):
        for row_id, view in _by_id(tx, kind, wanted[kind]).items():
            views[kind.value, row_id] = view
    deployments: dict[str, DeploymentView] = {}
    for dep_id in wanted[ChangeKind.DEPLOYMENT]:
        try:
            deployments[dep_id] = get_deployment(tx, dep_id)
        except UnknownDeployment:
            continue
    return views, deployments


async def change_views(
    store: Store,
    changes: Iterable[Change],
    *,
    live: Callable[[DeploymentView], DeploymentView] | None = None,
) -> list[tuple[Change, View]]:
    """Each change with its row's current view (``live(view)``, when given,
    adds a deployment's in-memory health, as ``GET`` of it does), read in
    one read of the store. A row that is gone (it cannot be, today: rows are
    marked, not deleted) is shown by its ids and the status the change
    recorded."""
    changes = list(changes)
    wanted: dict[ChangeKind, list[str]] = {kind: [] for kind in ChangeKind}
    for change in changes:
        ids = wanted[ChangeKind(change.kind)]
        if change.row_id not in ids:
            ids.append(change.row_id)
    views, deployments = await store.read(partial(_views, wanted=wanted))
    for dep_id, found in deployments.items():
        views[ChangeKind.DEPLOYMENT.value, dep_id] = msgspec.to_builtins(
            live(found) if live is not None else found
        )
    out: list[tuple[Change, View]] = []
    for change in changes:
        gone: View = {"id": change.row_id, "deployment_id": change.deployment_id,
                      "status": change.status}  # fmt: skip
        out.append((change, views.get((change.kind, change.row_id), gone)))
    return out
