"""What ``GET /events`` sends for a batch of changes: each changed row's
current JSON view, the same shapes as ``GET /dispatches/{id}``, ``GET
/runs/{id}`` and ``GET /workflows/deployments/{id}``.

A batch costs one query per kind for dispatches and runs (``IN`` over the
batch's ids), and one per deployment (its view counts its open dispatches;
deployments change seldom). Reads go through ``store.db``: committed rows
only, and never the writer's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from runtime import Connection

from .._errors import UnknownDeployment
from .changes import Change, ChangeKind
from .queries import _DISPATCH, _RUN, DeploymentView, _dispatch, _run, get_deployment
from .reads import fetch_all

View = dict[str, Any]


def _marks(n: int) -> str:
    return ", ".join("?" * n)


async def _by_id(db: Connection, kind: ChangeKind, ids: Sequence[str]) -> dict[str, View]:
    if not ids:
        return {}
    if kind is ChangeKind.DISPATCH:
        rows = await fetch_all(db, f"{_DISPATCH} WHERE id IN ({_marks(len(ids))})", ids)
        return {r[0]: msgspec.to_builtins(_dispatch(r)) for r in rows}
    rows = await fetch_all(db, f"{_RUN} AND id IN ({_marks(len(ids))})", ids)
    return {r[0]: msgspec.to_builtins(_run(r)) for r in rows}


async def change_views(
    db: Connection,
    changes: Iterable[Change],
    *,
    live: Callable[[DeploymentView], DeploymentView] | None = None,
) -> list[tuple[Change, View]]:
    """Each change with its row's current view (``live(view)``, when given,
    adds a deployment's in-memory health, as ``GET`` of it does). A row that
    is gone (it cannot be, today: rows are marked, not deleted) is shown by
    its ids and the status the change recorded."""
    changes = list(changes)
    wanted: dict[ChangeKind, list[str]] = {kind: [] for kind in ChangeKind}
    for change in changes:
        ids = wanted[ChangeKind(change.kind)]
        if change.row_id not in ids:
            ids.append(change.row_id)
    views: dict[tuple[str, str], View] = {}
    for kind in (ChangeKind.DISPATCH, ChangeKind.RUN):
        for row_id, view in (await _by_id(db, kind, wanted[kind])).items():
            views[kind.value, row_id] = view
    for dep_id in wanted[ChangeKind.DEPLOYMENT]:
        try:
            found: DeploymentView = await get_deployment(db, dep_id)
        except UnknownDeployment:
            continue
        views[ChangeKind.DEPLOYMENT.value, dep_id] = msgspec.to_builtins(
            live(found) if live is not None else found
        )
    out: list[tuple[Change, View]] = []
    for change in changes:
        gone: View = {"id": change.row_id, "deployment_id": change.deployment_id,
                      "status": change.status}  # fmt: skip
        out.append((change, views.get((change.kind, change.row_id), gone)))
    return out
