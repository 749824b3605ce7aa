"""Read models: the JSON shapes of deployments, runs and dispatches.

Each is a read body (``await store.read(partial(get_run, run_id=...))``):
committed data only. Shapes follow docs/design.md section 8; fields are added here,
never renamed.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from runtime import is_id
from runtime.wire import DeploymentStatus

from ..._errors import UnknownDeployment, UnknownDispatch, UnknownRun
from ..clock import run_timers
from ..mail import DEFAULT_SETTINGS, MailSettings, decode_settings
from ..schema import QUARANTINE_SOURCE, DispatchStatus
from ..sql import Tx, sql

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
    # Its failure policy (docs/design.md section 5, "When a handler fails").
    on_failure: str = "suspend"
    max_attempts: int = 5
    max_backoff: float = 60.0
    handler_timeout: float = 300.0
    max_concurrent_runs: int = 16  # its handler calls at once, each of another run
    paused_at: float | None = None  # since when it is paused (None: it is not)
    asleep_since: float | None = None  # since when its sidecar is asleep (None: it is awake)
    mail: MailSettings = DEFAULT_SETTINGS  # whom it takes mail from, replies, catch-all


class TimerView(msgspec.Struct, kw_only=True):
    """A run's pending ``ctx.set_timer`` timer."""

    name: str
    due_at: float
    payload: Any = None


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
    suspended_at: float | None = None  # when it was suspended (None: it is not)
    failing_dispatch_id: str | None = None  # the item it is suspended on
    # Its pending timers, earliest first (``GET /runs/{id}`` only; empty in lists).
    timers: list[TimerView] = msgspec.field(default_factory=list)


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
    error: str | None = None  # its handler's last error (a failed or parked one's)


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
       d.nats_user, d.version, d.rollout_version, d.on_failure, d.max_attempts, d.max_backoff,
       d.handler_timeout, d.max_concurrent_runs, d.paused_at, d.mail_settings, d.catch_all_domain,
       (SELECT s.since FROM deployment_sleep s WHERE s.deployment_id = d.id)
FROM deployment d """
# CROSS JOIN: SQLite takes the deployments first (few), then each one's
# anchor by its key; left to guess, it read every run for the anchors.
_ANCHOR = "CROSS JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1"
_ANCHOR_PG = "JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1"

_RUN = """
SELECT id, deployment_id, parent_run_id, is_top_level, status, result, error, state, last_seq,
       start_request_id, created_at, updated_at, version, suspended_at, failing_dispatch_id
FROM workflow_run WHERE is_anchor = 0"""

_DISPATCH = """
SELECT id, deployment_id, run_id, seq, kind, message_id, sender, subject, status, body_size,
       COALESCE(body_digest, inline_digest), attempts, last_error, created_at, delivered_at,
       processed_at, COALESCE(version, 1), error
FROM workflow_run_dispatch"""


def _json(text: str | bytes | None) -> Any:
    if text is None:
        return None
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text if isinstance(text, str) else text.decode("utf-8", "replace")


def _shown(anchor: str, paused_at: float | None, asleep_since: float | None) -> str:
    """A pause, then a sleep, is shown as the status; the anchor stays
    deployed (live)."""
    if anchor != DeploymentStatus.DEPLOYED:
        return anchor
    if paused_at is not None:
        return DeploymentStatus.PAUSED.value
    if asleep_since is not None:
        return DeploymentStatus.ASLEEP.value
    return anchor


def _deployment(row: Any) -> DeploymentView:
    return DeploymentView(
        id=row[0], name=row[1], address=row[2], public_key=row[3],
        status=_shown(row[4], row[23], row[26]),
        entrypoint=row[5], created_at=row[6], deleted_at=row[7], owner_instance=row[8],
        owner_epoch=row[9], next_seq=row[10], top_level_run_id=row[11],
        pending_dispatches=row[12], pending=row[13],
        oldest_wait=0.0 if row[14] is None else round(max(0.0, time.time() - row[14]), 3),
        nats_user=row[15], version=row[16], rollout_version=row[17], on_failure=row[18],
        max_attempts=row[19], max_backoff=row[20], handler_timeout=row[21],
        max_concurrent_runs=row[22], paused_at=row[23], mail=decode_settings(row[24], row[25]),
        asleep_since=row[26],
    )  # fmt: skip


def _run(row: Any) -> RunView:
    return RunView(
        id=row[0], deployment_id=row[1], parent_run_id=row[2], is_top_level=bool(row[3]),
        status=row[4], result=_json(row[5]), error=row[6], state=_json(row[7]),
        last_seq=row[8], start_request_id=row[9], created_at=row[10], updated_at=row[11],
        version=row[12], suspended_at=row[13], failing_dispatch_id=row[14],
    )  # fmt: skip


def dispatch_view(row: Any) -> DispatchView:
    return DispatchView(**dict(zip(DispatchView.__struct_fields__, row, strict=True)))


_IN_JSON = "IN (SELECT value FROM json_each(?))"
_IN_JSON_PG = "IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))"

_DEPLOYMENT_ID = sql("SELECT id FROM deployment WHERE id = ?")
_DEPLOYMENT_NAMED = sql(
    "SELECT id FROM deployment WHERE name = ?"
    " ORDER BY deleted_at IS NULL DESC, created_at DESC LIMIT 1"
)
_DEPLOYMENT_VIEW = sql(
    f"{_DEPLOYMENT}{_ANCHOR} WHERE d.id = ?", postgres=f"{_DEPLOYMENT}{_ANCHOR_PG} WHERE d.id = ?"
)
_ORDERED = " ORDER BY d.created_at, d.id"
_DEPLOYMENT_VIEWS = sql(
    f"{_DEPLOYMENT}{_ANCHOR}{_ORDERED}", postgres=f"{_DEPLOYMENT}{_ANCHOR_PG}{_ORDERED}"
)
# The status asked for is the caller's, so bound; ``+`` keeps SQLite from
# weighing the run table's partial index on a status against it, which it
# would do (compiling the statement again) at every run.
_DEPLOYMENT_VIEWS_IN = sql(
    f"{_DEPLOYMENT}{_ANCHOR} WHERE +a.status = ?{_ORDERED}",
    postgres=f"{_DEPLOYMENT}{_ANCHOR_PG} WHERE a.status = ?{_ORDERED}",
)
_QUARANTINED = (
    "SELECT deployment_id, COUNT(*) FROM dead_letter WHERE source = ? AND deployment_id IS NOT NULL"
)
_QUARANTINED_ALL = sql(f"{_QUARANTINED} GROUP BY deployment_id")
_QUARANTINED_OF = sql(f"{_QUARANTINED} AND deployment_id = ? GROUP BY deployment_id")
_RUN_VIEW = sql(f"{_RUN} AND id = ?")
RUNS_BY_ID = sql(f"{_RUN} AND id {_IN_JSON}", postgres=f"{_RUN} AND id {_IN_JSON_PG}")
"""The views of a JSON array of run ids (``json_array``)."""
_DEPLOYMENT_OF_RUN = sql("SELECT deployment_id FROM workflow_run WHERE id = ? AND is_anchor = 0")
_LATEST_RUNS = sql(f"{_RUN} ORDER BY created_at DESC, id DESC LIMIT ?")
_LATEST_RUNS_OF = sql(f"{_RUN} AND deployment_id = ? ORDER BY created_at DESC, id DESC LIMIT ?")
_DISPATCH_VIEW = sql(f"{_DISPATCH} WHERE id = ?")
DISPATCHES_BY_ID = sql(
    f"{_DISPATCH} WHERE id {_IN_JSON}", postgres=f"{_DISPATCH} WHERE id {_IN_JSON_PG}"
)
"""The views of a JSON array of dispatch ids (``json_array``)."""
_LATEST_DISPATCHES = sql(f"{_DISPATCH} WHERE run_id = ? ORDER BY seq DESC LIMIT ?")


def resolve_deployment(tx: Tx, key: str) -> str:
    """A deployment id from an id or a name (the live one, else the latest deleted)."""
    row = tx.fetch_one(_DEPLOYMENT_ID if is_id(key, "dep") else _DEPLOYMENT_NAMED, (key,))
    if row is None:
        raise UnknownDeployment(f"no deployment {key!r}")
    return str(row[0])


def get_deployment(tx: Tx, key: str) -> DeploymentView:
    dep_id = resolve_deployment(tx, key)
    row = tx.fetch_one(_DEPLOYMENT_VIEW, (dep_id,))
    if row is None:
        raise UnknownDeployment(f"no deployment {key!r}")
    return _with_quarantined(tx, [_deployment(row)], dep_id)[0]


def list_deployments(tx: Tx, *, status: str | None = None) -> list[DeploymentView]:
    """The deployments, those of ``status`` only if given: ``deployed`` is
    every live one (paused and asleep ones too), ``paused`` and ``asleep``
    only those shown so."""
    shown = status in (DeploymentStatus.PAUSED, DeploymentStatus.ASLEEP)
    if status:
        anchor = DeploymentStatus.DEPLOYED.value if shown else status
        rows = tx.fetch_all(_DEPLOYMENT_VIEWS_IN, (anchor,))
    else:
        rows = tx.fetch_all(_DEPLOYMENT_VIEWS)
    views = [_deployment(row) for row in rows]
    if shown:
        views = [v for v in views if v.status == status]
    return _with_quarantined(tx, views)


def _with_quarantined(
    tx: Tx, views: list[DeploymentView], deployment_id: str | None = None
) -> list[DeploymentView]:
    """Fill each view's ``quarantined`` count (one grouped query for the lot)."""
    if deployment_id:
        rows = tx.fetch_all(_QUARANTINED_OF, (QUARANTINE_SOURCE, deployment_id))
    else:
        rows = tx.fetch_all(_QUARANTINED_ALL, (QUARANTINE_SOURCE,))
    counts = {str(dep): int(n) for dep, n in rows}
    return [msgspec.structs.replace(v, quarantined=counts.get(v.id, 0)) for v in views]


def get_run(tx: Tx, run_id: str) -> RunView:
    row = tx.fetch_one(_RUN_VIEW, (run_id,))
    if row is None:
        raise UnknownRun(f"no run {run_id!r}")
    timers = [TimerView(name=t.name, due_at=t.due_at, payload=_json(t.payload))
              for t in run_timers(tx, run_id)]  # fmt: skip
    return msgspec.structs.replace(_run(row), timers=timers)


def deployment_of_run(tx: Tx, run_id: str) -> str:
    """The deployment a run belongs to (a run never moves, so this read may
    precede the transaction that targets the run)."""
    row = tx.fetch_one(_DEPLOYMENT_OF_RUN, (run_id,))
    if row is None:
        raise UnknownRun(f"no run {run_id!r}")
    return str(row[0])


def list_runs(tx: Tx, *, deployment: str | None = None, limit: int = 100) -> list[RunView]:
    """The latest ``limit`` runs (of one deployment: id or name), oldest first."""
    if deployment is None:
        rows = tx.fetch_all(_LATEST_RUNS, (limit,))
    else:
        rows = tx.fetch_all(_LATEST_RUNS_OF, (resolve_deployment(tx, deployment), limit))
    return [_run(row) for row in reversed(rows)]


def get_dispatch(tx: Tx, dispatch_id: str) -> DispatchView:
    row = tx.fetch_one(_DISPATCH_VIEW, (dispatch_id,))
    if row is None:
        raise UnknownDispatch(f"no dispatch {dispatch_id!r}")
    return dispatch_view(row)


def list_dispatches(tx: Tx, run_id: str, *, limit: int = 100) -> list[DispatchView]:
    """A run's latest ``limit`` dispatches, in its order (seq, oldest first)."""
    return [
        dispatch_view(row) for row in reversed(tx.fetch_all(_LATEST_DISPATCHES, (run_id, limit)))
    ]


# The store keeps every dispatch, so counting them by status reads them all;
# every deployment's seqs run from 1 without a gap (next_seq is one past the
# last), so its dispatches number next_seq - 1, and the processed ones are
# what is left of that beside the others, which an index search counts.
#
# A retried parked dispatch takes a new seq and leaves its old one unused:
# the processed count is then over by one for each retry (a figure for
# dashboards, not an account).
_COUNTED = (
    DispatchStatus.RESERVED,
    DispatchStatus.DELIVERED,
    DispatchStatus.CANCELLED,
    DispatchStatus.PARKED,
)
_COUNT_IN = "SUM((SELECT COUNT(*) FROM workflow_run_dispatch x WHERE x.deployment_id = d.id"
_DISPATCH_COUNTS = sql(
    f"SELECT SUM(d.next_seq - 1), {_COUNT_IN} AND x.status = 'reserved')),"
    f" {_COUNT_IN} AND x.status = 'delivered')),"
    f" {_COUNT_IN} AND x.status = 'cancelled')),"
    f" {_COUNT_IN} AND x.status = 'parked')) FROM deployment d"
)
_DEPLOYMENT_COUNTS = sql(
    f"SELECT a.status, COUNT(*) FROM deployment d {_ANCHOR} GROUP BY 1",
    postgres=f"SELECT a.status, COUNT(*) FROM deployment d {_ANCHOR_PG} GROUP BY 1",
)


def count_by_status(tx: Tx) -> dict[str, dict[str, int]]:
    """``{"dispatches": {status: n}, "deployments": {status: n}}`` for metrics:
    a few index searches per deployment, whatever the dispatches kept."""
    row = tx.fetch_one(_DISPATCH_COUNTS)
    total, *counted = (int(n or 0) for n in (row or [0] * (1 + len(_COUNTED))))
    dispatches = {status.value: n for status, n in zip(_COUNTED, counted, strict=True)}
    dispatches[DispatchStatus.PROCESSED.value] = total - sum(counted)
    anchors = tx.fetch_all(_DEPLOYMENT_COUNTS)
    return {
        "dispatches": {s.value: dispatches[s.value] for s in DispatchStatus},
        "deployments": {str(s): int(n) for s, n in anchors},
    }
