"""Read models: the JSON shapes of deployments, runs and dispatches.

Every query reads through ``store.db`` (committed data only). Shapes follow
docs/design.md section 8; fields are added here, never renamed.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from runtime import Connection, is_id

from .._errors import UnknownDeployment, UnknownDispatch, UnknownRun
from .reads import fetch_all, fetch_one
from .schema import QUARANTINE_SOURCE, DispatchStatus

_OPEN = (DispatchStatus.RESERVED.value, DispatchStatus.DELIVERED.value)


class DeploymentView(msgspec.Struct, kw_only=True):
    id: str
    name: str
    address: str
    public_key: str
    status: str  # the anchor's: deployed | deleted
    entrypoint: str
    created_at: float
    deleted_at: float | None
    owner_instance: str | None
    owner_epoch: int
    next_seq: int
    top_level_run_id: str | None
    pending_dispatches: int  # reserved or delivered, not yet processed
    quarantined: int = 0  # envelopes its sidecar could not read (hub dead letters)
    pending: int  # reserved: accepted, not yet delivered to the sidecar
    oldest_wait: float  # seconds the oldest of those has waited (0.0: none)
    # Filled from the wire side's memory by the HTTP layer (``Wire.deployment_health``).
    connected: bool = False
    last_error: str | None = None
    stuck: int = 0  # dispatches sent again for not being processed, still unprocessed
    nats_user: str | None = None  # its NATS identity's public nkey (None: from before them)
    version: int = 1  # the active workflow version
    rollout_version: int | None = None  # a version being loaded by the sidecar, to become active


class RunView(msgspec.Struct, kw_only=True):
    id: str
    deployment_id: str
    parent_run_id: str | None
    is_top_level: bool
    status: str
    result: Any
    error: str | None
    state: Any  # the hub's copy: the state the last applied DispatchProcessed carried
    last_seq: int
    start_request_id: str | None
    created_at: float
    updated_at: float
    version: int = 0  # the workflow version that processed its latest item (0: none yet)


class DispatchView(msgspec.Struct, kw_only=True):
    id: str
    deployment_id: str
    run_id: str
    seq: int
    kind: str
    message_id: str | None
    sender: str | None
    subject: str | None
    status: str
    body_size: int
    body_digest: str | None
    attempts: int
    last_error: str | None
    created_at: float
    delivered_at: float | None
    processed_at: float | None
    version: int  # the workflow version that processes (processed) it


_DEPLOYMENT = f"""
SELECT d.id, d.name, d.address, d.public_key, a.status, d.entrypoint, d.created_at,
       d.deleted_at, d.owner_instance, d.owner_epoch, d.next_seq,
       (SELECT t.id FROM workflow_run t WHERE t.deployment_id = d.id AND t.is_top_level = 1),
       (SELECT COUNT(*) FROM workflow_run_dispatch x WHERE x.deployment_id = d.id
          AND x.status IN ('{_OPEN[0]}', '{_OPEN[1]}')),
       (SELECT COUNT(*) FROM workflow_run_dispatch x WHERE x.deployment_id = d.id
          AND x.status = '{_OPEN[0]}'),
       (SELECT MIN(x.created_at) FROM workflow_run_dispatch x WHERE x.deployment_id = d.id
          AND x.status = '{_OPEN[0]}'),
       d.nats_user, d.version, d.rollout_version
FROM deployment d JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1"""

_RUN = """
SELECT id, deployment_id, parent_run_id, is_top_level, status, result, error, state, last_seq,
       start_request_id, created_at, updated_at, version
FROM workflow_run WHERE is_anchor = 0"""

_DISPATCH = """
SELECT id, deployment_id, run_id, seq, kind, message_id, sender, subject, status, body_size,
       COALESCE(body_digest, inline_digest), attempts, last_error, created_at, delivered_at,
       processed_at, COALESCE(version, 1)
FROM workflow_run_dispatch"""


def _json(text: str | bytes | None) -> Any:
    if text is None:
        return None
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text if isinstance(text, str) else text.decode("utf-8", "replace")


def _deployment(row: Any) -> DeploymentView:
    return DeploymentView(
        id=row[0], name=row[1], address=row[2], public_key=row[3], status=row[4],
        entrypoint=row[5], created_at=row[6], deleted_at=row[7], owner_instance=row[8],
        owner_epoch=row[9], next_seq=row[10], top_level_run_id=row[11],
        pending_dispatches=row[12], pending=row[13],
        oldest_wait=0.0 if row[14] is None else round(max(0.0, time.time() - row[14]), 3),
        nats_user=row[15], version=row[16], rollout_version=row[17],
    )  # fmt: skip


def _run(row: Any) -> RunView:
    return RunView(
        id=row[0], deployment_id=row[1], parent_run_id=row[2], is_top_level=bool(row[3]),
        status=row[4], result=_json(row[5]), error=row[6], state=_json(row[7]),
        last_seq=row[8], start_request_id=row[9], created_at=row[10], updated_at=row[11],
        version=row[12],
    )  # fmt: skip


def _dispatch(row: Any) -> DispatchView:
    return DispatchView(**dict(zip(DispatchView.__struct_fields__, row, strict=True)))


async def resolve_deployment(db: Connection, key: str) -> str:
    """A deployment id from an id or a name (the live one, else the latest deleted)."""
    if is_id(key, "dep"):
        rows = await fetch_all(db, "SELECT id FROM deployment WHERE id = ?", (key,))
    else:
        rows = await fetch_all(
            db,
            "SELECT id FROM deployment WHERE name = ?"
            " ORDER BY deleted_at IS NULL DESC, created_at DESC LIMIT 1",
            (key,),
        )
    if not rows:
        raise UnknownDeployment(f"no deployment {key!r}")
    return str(rows[0][0])


async def get_deployment(db: Connection, key: str) -> DeploymentView:
    dep_id = await resolve_deployment(db, key)
    view = _deployment((await fetch_all(db, f"{_DEPLOYMENT} WHERE d.id = ?", (dep_id,)))[0])
    return (await _with_quarantined(db, [view], dep_id))[0]


async def list_deployments(db: Connection, *, status: str | None = None) -> list[DeploymentView]:
    where, params = ("WHERE a.status = ?", (status,)) if status else ("", ())
    rows = await fetch_all(db, f"{_DEPLOYMENT} {where} ORDER BY d.created_at, d.id", params)
    return await _with_quarantined(db, [_deployment(row) for row in rows])


async def _with_quarantined(
    db: Connection, views: list[DeploymentView], deployment_id: str | None = None
) -> list[DeploymentView]:
    """Fill each view's ``quarantined`` count (one grouped query for the lot)."""
    where, params = ("AND deployment_id = ?", (deployment_id,)) if deployment_id else ("", ())
    rows = await fetch_all(
        db,
        "SELECT deployment_id, COUNT(*) FROM dead_letter WHERE source = ?"
        f" AND deployment_id IS NOT NULL {where} GROUP BY deployment_id",
        (QUARANTINE_SOURCE, *params),
    )
    counts = {str(dep): int(n) for dep, n in rows}
    return [msgspec.structs.replace(v, quarantined=counts.get(v.id, 0)) for v in views]


async def get_run(db: Connection, run_id: str) -> RunView:
    rows = await fetch_all(db, f"{_RUN} AND id = ?", (run_id,))
    if not rows:
        raise UnknownRun(f"no run {run_id!r}")
    return _run(rows[0])


async def deployment_of_run(db: Connection, run_id: str) -> str:
    """The deployment a run belongs to (a run never moves, so this read may
    precede the transaction that targets the run)."""
    rows = await fetch_all(
        db, "SELECT deployment_id FROM workflow_run WHERE id = ? AND is_anchor = 0", (run_id,)
    )
    if not rows:
        raise UnknownRun(f"no run {run_id!r}")
    return str(rows[0][0])


async def list_runs(
    db: Connection, *, deployment: str | None = None, limit: int = 100
) -> list[RunView]:
    """The latest ``limit`` runs (of one deployment: id or name), oldest first."""
    where, params = "", tuple[str, ...]()
    if deployment is not None:
        where, params = "AND deployment_id = ?", (await resolve_deployment(db, deployment),)
    sql = f"{_RUN} {where} ORDER BY created_at DESC, id DESC LIMIT ?"
    return [_run(row) for row in reversed(await fetch_all(db, sql, (*params, limit)))]


async def get_dispatch(db: Connection, dispatch_id: str) -> DispatchView:
    rows = await fetch_all(db, f"{_DISPATCH} WHERE id = ?", (dispatch_id,))
    if not rows:
        raise UnknownDispatch(f"no dispatch {dispatch_id!r}")
    return _dispatch(rows[0])


async def list_dispatches(db: Connection, run_id: str, *, limit: int = 100) -> list[DispatchView]:
    """A run's latest ``limit`` dispatches, in its order (seq, oldest first)."""
    sql = f"{_DISPATCH} WHERE run_id = ? ORDER BY seq DESC LIMIT ?"
    return [_dispatch(row) for row in reversed(await fetch_all(db, sql, (run_id, limit)))]


# The store keeps every dispatch, so counting them by status reads them all;
# every deployment's seqs run from 1 without a gap (next_seq is one past the
# last), so its dispatches number next_seq - 1, and the processed ones are
# what is left of that beside the others, which an index search counts.
_COUNTED = (DispatchStatus.RESERVED, DispatchStatus.DELIVERED, DispatchStatus.CANCELLED)
_DISPATCH_COUNTS = "SELECT SUM(d.next_seq - 1), {} FROM deployment d".format(
    ", ".join(
        "SUM((SELECT COUNT(*) FROM workflow_run_dispatch x"
        f" WHERE x.deployment_id = d.id AND x.status = '{status.value}'))"
        for status in _COUNTED
    )
)


async def count_by_status(db: Connection) -> dict[str, dict[str, int]]:
    """``{"dispatches": {status: n}, "deployments": {status: n}}`` for metrics:
    a few index searches per deployment, whatever the dispatches kept."""
    row = await fetch_one(db, _DISPATCH_COUNTS)
    total, *counted = (int(n or 0) for n in (row or [0] * (1 + len(_COUNTED))))
    dispatches = {status.value: n for status, n in zip(_COUNTED, counted, strict=True)}
    dispatches[DispatchStatus.PROCESSED.value] = total - sum(counted)
    anchors = await fetch_all(
        db,
        "SELECT a.status, COUNT(*) FROM deployment d"
        " JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1 GROUP BY 1",
    )
    return {
        "dispatches": {s.value: dispatches[s.value] for s in DispatchStatus},
        "deployments": {str(s): int(n) for s, n in anchors},
    }
