"""The one read-or-mint function every trigger path calls.

:func:`accept_triggers` runs inside a write transaction its caller holds
(``BEGIN IMMEDIATE`` on SQLite: no other writer exists until it commits;
on PostgreSQL the batch's deployment rows locked, below). It reads what a
batch needs in a handful of queries, decides each trigger in order in
memory, then writes the outcome in a few statements (``hub.store.sql``'s ``insert_rows``).
A trigger that trips an unexpected constraint (``StoreConflict``) is retried
alone under a SAVEPOINT, so it fails by itself and never takes its batch
mates with it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec

from runtime import (
    INLINE_BODY_LIMIT,
    Reason,
    RunStatus,
    accepts_trigger,
    anchor_is_live,
    new_id,
)

from ..._errors import AcceptFailed, StoreConflict
from ..schema import ApprovalStatus, DispatchStatus
from ..sql import Tx, insert_rows, insert_statement, json_array, sql
from .triggers import Accepted, Outcome, Receipt, RefusedByRun, Rejected, Trigger, body_digest

__all__ = [
    "Accepted",
    "NewDispatch",
    "Outcome",
    "Receipt",
    "RefusedByRun",
    "Rejected",
    "Trigger",
    "accept_triggers",
    "body_digest",
]


class NewDispatch(NamedTuple):
    """A dispatch as the accept inserts it: the INSERT's columns, in order."""

    id: str
    deployment_id: str
    run_id: str
    seq: int
    kind: str
    message_id: str | None
    sender: str | None
    subject: str | None
    body: bytes | None  # None: claim-checked (``body_digest`` names its blob)
    body_digest: str | None
    body_size: int
    status: str
    created_at: float
    version: int
    raw_digest: str | None
    raw_size: int | None


class NewRun(NamedTuple):
    """A top-level run minted by its deployment's first trigger."""

    id: str
    deployment_id: str
    is_anchor: int
    is_top_level: int
    status: str
    created_at: float
    updated_at: float


# A list of ids is one parameter, a JSON array (store-conventions): the
# statement's text is the same whatever the batch holds.
_IN_JSON = "IN (SELECT value FROM json_each(?))"
_IN_JSON_PG = "IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))"

_DEPLOYMENT_COLUMNS = "SELECT d.id, d.address, a.status, d.next_seq, d.version"
# CROSS JOIN: SQLite takes the deployment rows first (few), then each one's
# anchor by its key; left to guess, it read every run for the anchors.
_DEPLOYMENTS = (
    _DEPLOYMENT_COLUMNS
    + " FROM deployment d CROSS JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1 WHERE "
)
_DEPLOYMENTS_PG = (
    _DEPLOYMENT_COLUMNS
    + " FROM deployment d JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1 WHERE "
)
_LIVE_LAST = " ORDER BY d.deleted_at IS NULL, d.created_at, d.id"  # live rows win per address
# The anchor lock on PostgreSQL, where hubs accept at once: the deployment
# rows, locked in one order (no deadlock between two batches), read as the
# last commit left them; what the batch reads next (the top-level run, the
# message ids, the approvals again) is read after the lock, so it is the
# last commit's too. On SQLite, BEGIN IMMEDIATE already holds every row.
_LOCKED = " FOR UPDATE OF d"


# One statement per shape of the lookup: an ``IN`` over an empty list beside
# an OR kept SQLite from searching the indexes of the other side.
_BY_ADDRESS = sql(
    _DEPLOYMENTS + f"d.address {_IN_JSON}" + _LIVE_LAST,
    postgres=_DEPLOYMENTS_PG + f"d.address {_IN_JSON_PG}" + _LIVE_LAST + _LOCKED,
)
_BY_ID = sql(
    _DEPLOYMENTS + f"d.id {_IN_JSON}" + _LIVE_LAST,
    postgres=_DEPLOYMENTS_PG + f"d.id {_IN_JSON_PG}" + _LIVE_LAST + _LOCKED,
)
_BY_ADDRESS_OR_ID = sql(
    _DEPLOYMENTS + f"d.address {_IN_JSON} OR d.id {_IN_JSON}" + _LIVE_LAST,
    postgres=_DEPLOYMENTS_PG
    + f"d.address {_IN_JSON_PG} OR d.id {_IN_JSON_PG}"
    + _LIVE_LAST
    + _LOCKED,
)

_RUNS = """SELECT id, deployment_id, status, is_top_level,
 parent_run_id IS NOT NULL AND entrypoint IS NULL
FROM workflow_run WHERE is_anchor = 0 AND """
_TOP_LEVEL = sql(
    _RUNS + f"is_top_level = 1 AND deployment_id {_IN_JSON}",
    postgres=_RUNS + f"is_top_level = 1 AND deployment_id {_IN_JSON_PG}",
)
_TOP_LEVEL_OR_NAMED = sql(
    _RUNS + f"((is_top_level = 1 AND deployment_id {_IN_JSON}) OR id {_IN_JSON})",
    postgres=_RUNS + f"((is_top_level = 1 AND deployment_id {_IN_JSON_PG}) OR id {_IN_JSON_PG})",
)

_APPROVALS = """SELECT a.id, a.run_id, r.deployment_id, a.status FROM approval a
JOIN workflow_run r ON r.id = a.run_id WHERE a.id """
_APPROVALS_BY_ID = sql(_APPROVALS + _IN_JSON, postgres=_APPROVALS + _IN_JSON_PG)

# The dispatches of one deployment with any of a list of message ids: what a
# retry is answered from. One deployment at a time, so that SQLite searches
# the (deployment_id, message_id) index; a row-value ``IN (VALUES ...)`` over
# several deployments read the whole table for every batch.
_PRIOR = """SELECT id, run_id, deployment_id, seq, message_id, status, last_error,
 kind, sender, subject, body, COALESCE(body_digest, inline_digest), body_size
FROM workflow_run_dispatch WHERE deployment_id = ? AND message_id """
PRIOR_DISPATCHES = sql(_PRIOR + _IN_JSON, postgres=_PRIOR + _IN_JSON_PG)

_INSERT_RUNS = insert_statement("workflow_run", NewRun._fields)
_INSERT_DISPATCHES = insert_statement("workflow_run_dispatch", NewDispatch._fields)
# With several hubs, another hub's blob collection may be deciding that a
# blob is unused while this batch names it again: on PostgreSQL the upsert
# locks the row and makes it new, and collection spares new blobs
# (``delivery/blobs.py``'s grace). One hub on SQLite collects between its
# own writes.
_INSERT_BLOB = sql(
    "INSERT OR IGNORE INTO blob (digest, size, data, created_at) VALUES (?, ?, ?, ?)",
    postgres="INSERT INTO blob (digest, size, data, created_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (digest) DO UPDATE SET created_at = EXCLUDED.created_at",
)
_NEXT_SEQ = sql("UPDATE deployment SET next_seq = ? WHERE id = ?")
_DECIDE = sql("UPDATE approval SET status = ?, decision = ?, decided_at = ? WHERE id = ?")

_SAVEPOINT = sql("SAVEPOINT accept")
_RELEASE = sql("RELEASE accept")
_ROLLBACK_TO = sql("ROLLBACK TO accept")


@dataclass(frozen=True)
class _Content:
    """What a message id stands for: a retry must bring the same.

    The recipient is implied (message ids are unique per deployment). A body
    is compared as its bytes when they are at hand (a dispatch's inline body,
    a trigger earlier in the batch), else by sha256 and size (a claim-checked
    dispatch keeps only those): both are exact. A missing sender or subject
    equals an empty one (release 1 stored NULL where this one stores "").
    """

    kind: str
    sender: str
    subject: str
    body: bytes | None  # None: only the digest and size are known
    digest: str | None
    size: int

    @classmethod
    def of(cls, t: Trigger) -> _Content:
        return cls(t.kind, t.sender or "", t.subject or "", t.body, None, len(t.body))

    @classmethod
    def stored(cls, row: Sequence[Any]) -> _Content:
        """From a dispatch's ``kind, sender, subject, body``, its digest (a
        claim check's, or a processed inline body's) and ``body_size``."""
        kind, sender, subject, body, digest, size = row
        inline = bytes(body or b"") if digest is None else None
        return cls(kind, sender or "", subject or "", inline, digest, size)

    def differences(self, t: Trigger) -> list[str]:
        """The fields in which ``t`` is not a retry of this content."""
        different = [
            name
            for name, mine, theirs in (
                ("kind", self.kind, t.kind),
                ("from", self.sender, t.sender or ""),
                ("subject", self.subject, t.subject or ""),
            )
            if mine != theirs
        ]
        if self.body is not None:
            same_body = self.body == t.body
        else:  # the size first: a digest costs a pass over the body
            same_body = self.size == len(t.body) and self.digest == (
                t.digest or body_digest(t.body)
            )
        return different if same_body else [*different, "body"]


@dataclass
class _Deployment:
    id: str
    address: str
    anchor_status: str
    next_seq: int
    version: int  # the active workflow version, stamped on each dispatch


class _Batch:
    """A batch's view of the store, updated in memory as triggers are decided."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.deps: dict[str, _Deployment] = {}
        self.addresses: dict[str, str] = {}
        self.runs: dict[str, tuple[str, str]] = {}  # run id -> (deployment_id, status)
        self.top_level: dict[str, str] = {}  # deployment id -> run id
        self.unstarted: set[str] = set()  # child runs whose start item is not accepted yet
        # (deployment id, message id) -> what it was accepted with, and the answer
        self.seen: dict[tuple[str, str], tuple[_Content, Accepted | RefusedByRun]] = {}
        self.approvals: dict[str, list[str]] = {}  # id -> [run_id, deployment_id, status]
        self.woken: set[str] = set()
        self.new_runs: list[NewRun] = []
        self.blobs: list[tuple[object, ...]] = []
        self.dispatches: list[NewDispatch] = []
        self.decided: list[tuple[object, ...]] = []

    def load(self, tx: Tx, triggers: Sequence[Trigger]) -> None:
        approval_ids = sorted({t.approval_id for t in triggers if t.approval_id})
        self._load_approvals(tx, approval_ids)
        addresses = sorted({t.address for t in triggers if t.address and not t.deployment_id})
        dep_ids = sorted({t.deployment_id for t in triggers if t.deployment_id}
                         | {a[1] for a in self.approvals.values()})  # fmt: skip
        if addresses and dep_ids:
            found = tx.fetch_all(_BY_ADDRESS_OR_ID, (json_array(addresses), json_array(dep_ids)))
        elif addresses or dep_ids:
            found = tx.fetch_all(
                _BY_ADDRESS if addresses else _BY_ID, (json_array(addresses or dep_ids),)
            )
        else:
            found = []
        for row in found:
            self.deps[row[0]] = _Deployment(*row)
            self.addresses[row[1]] = row[0]
        # Decided meanwhile? On PostgreSQL another hub may have decided one
        # while this batch waited for the deployments' lock; rare enough to
        # ask again on both databases.
        self._load_approvals(tx, approval_ids)
        if not self.deps:
            return
        deps = json_array(sorted(self.deps))
        run_ids = sorted({t.run_id for t in triggers if t.run_id})
        run_ids += [a[0] for a in self.approvals.values()]
        if run_ids:
            runs = tx.fetch_all(_TOP_LEVEL_OR_NAMED, (deps, json_array(run_ids)))
        else:
            runs = tx.fetch_all(_TOP_LEVEL, (deps,))
        for run_id, dep_id, status, top, unstarted in runs:
            self.runs[run_id] = (dep_id, status)
            if unstarted:
                self.unstarted.add(run_id)
            if top:
                self.top_level[dep_id] = run_id
        wanted: dict[str, set[str]] = {}
        for t in triggers:
            if t.message_id and (dep_id := self._deployment_of(t)) is not None:
                wanted.setdefault(dep_id, set()).add(t.message_id)
        for dep_id, message_ids in sorted(wanted.items()):
            for dsp, run_id, _, seq, mid, status, error, *content in tx.fetch_all(
                PRIOR_DISPATCHES, (dep_id, json_array(sorted(message_ids)))
            ):
                first = Accepted(
                    dispatch_id=dsp, run_id=run_id, deployment_id=dep_id, seq=seq, duplicate=True
                )
                answer = _refused(first, status, error) or first
                self.seen[(dep_id, mid)] = (_Content.stored(content), answer)

    def _load_approvals(self, tx: Tx, approval_ids: list[str]) -> None:
        if approval_ids:
            for approval_id, run_id, dep_id, status in tx.fetch_all(
                _APPROVALS_BY_ID, (json_array(approval_ids),)
            ):
                self.approvals[approval_id] = [run_id, dep_id, status]

    def _deployment_of(self, t: Trigger) -> str | None:
        if t.approval_id:
            approval = self.approvals.get(t.approval_id)
            return approval[1] if approval else None
        if t.deployment_id:
            return t.deployment_id if t.deployment_id in self.deps else None
        return self.addresses.get(t.address or "")

    def decide(self, t: Trigger) -> Receipt:
        """Decide one trigger against the batch's view, recording what to write."""
        dep_id = self._deployment_of(t)
        if dep_id is None:
            if t.approval_id:
                return Rejected(
                    reason=Reason.UNKNOWN_APPROVAL, detail=f"no approval {t.approval_id}"
                )
            if t.deployment_id:
                return Rejected(reason=Reason.UNKNOWN_DEPLOYMENT, detail=f"no {t.deployment_id}")
            return Rejected(reason=Reason.UNKNOWN_ADDRESS, detail=f"no deployment at {t.address!r}")
        dep = self.deps[dep_id]
        if not anchor_is_live(dep.anchor_status):
            return Rejected(reason=Reason.DEPLOYMENT_NOT_LIVE, detail=f"{dep_id} is deleted")
        if t.message_id and (seen := self.seen.get((dep_id, t.message_id))):
            content, first = seen
            if different := content.differences(t):
                return Rejected(
                    reason=Reason.MESSAGE_ID_REUSED,
                    detail=f"message id {t.message_id!r} was accepted with another"
                    f" {', '.join(different)} (dispatch {first.dispatch_id})",
                )
            if isinstance(first, RefusedByRun):
                return first
            return msgspec.structs.replace(first, duplicate=True)
        run_id = t.run_id
        if t.approval_id:
            run_id, _, approval_status = self.approvals[t.approval_id]
            if approval_status != ApprovalStatus.PENDING:
                return Rejected(
                    reason=Reason.APPROVAL_DECIDED, detail=f"{t.approval_id} is decided"
                )
        if run_id is None:
            run_id = self.top_level.get(dep_id)
        elif self.runs.get(run_id, ("",))[0] != dep_id:
            return Rejected(reason=Reason.UNKNOWN_RUN, detail=f"{dep_id} has no run {run_id}")
        status = self.runs[run_id][1] if run_id is not None else None
        if run_id in self.unstarted and t.kind != "start":
            # Its start item comes first: nothing may overtake it.
            return Rejected(
                reason=Reason.RUN_NOT_STARTED, detail=f"child run {run_id} has not started"
            )
        if not accepts_trigger(status):
            return Rejected(reason=Reason.WORKFLOW_RUN_TERMINAL, detail=f"run {run_id} is {status}")
        if run_id is None:
            run_id = new_id("run")
            self.runs[run_id] = (dep_id, RunStatus.RUNNING.value)
            self.top_level[dep_id] = run_id
            self.new_runs.append(
                NewRun(run_id, dep_id, 0, 1, RunStatus.RUNNING.value, self.now, self.now)
            )
        seq = dep.next_seq
        dep.next_seq += 1
        body: bytes | None = t.body
        digest = None
        if len(t.body) > INLINE_BODY_LIMIT:
            body, digest = None, t.digest or body_digest(t.body)
            self.blobs.append((digest, len(t.body), t.body, self.now))
        raw_digest = None
        if t.raw is not None:
            raw_digest = t.raw_digest or body_digest(t.raw)
            self.blobs.append((raw_digest, len(t.raw), t.raw, self.now))
        receipt = Accepted(dispatch_id=new_id("dsp"), run_id=run_id, deployment_id=dep_id, seq=seq)
        self.dispatches.append(
            NewDispatch(
                receipt.dispatch_id,
                dep_id,
                run_id,
                seq,
                t.kind,
                t.message_id,
                t.sender,
                t.subject,
                body,
                digest,
                len(t.body),
                DispatchStatus.RESERVED.value,
                self.now,
                dep.version,
                raw_digest,
                None if t.raw is None else len(t.raw),
            )
        )
        if t.message_id:
            self.seen[(dep_id, t.message_id)] = (_Content.of(t), receipt)
        if t.approval_id:
            self.approvals[t.approval_id][2] = ApprovalStatus.DECIDED.value
            self.decided.append((ApprovalStatus.DECIDED.value, t.decision, self.now, t.approval_id))
        self.woken.add(dep_id)
        return receipt

    def write(self, tx: Tx) -> None:
        insert_rows(tx, _INSERT_RUNS, self.new_runs)
        tx.execute_many(_INSERT_BLOB, self.blobs)
        insert_rows(tx, _INSERT_DISPATCHES, self.dispatches)
        tx.execute_many(_NEXT_SEQ, [(self.deps[d].next_seq, d) for d in sorted(self.woken)])
        tx.execute_many(_DECIDE, self.decided)


def _refused(first: Accepted, status: str, error: str | None) -> RefusedByRun | None:
    """What a retry learns of a dispatch its run refused (it had ended first).

    The hub accepts a trigger while the run is live by what the hub knows; the
    sidecar may have completed the run before the hub hears of it. Such a
    dispatch is cancelled once the sidecar refuses it, and from then on its
    message id is answered with the refusal instead of the stale receipt, so
    the sender learns the outcome (docs/faults.md, F14).
    """
    if status != DispatchStatus.CANCELLED or error != Reason.WORKFLOW_RUN_TERMINAL:
        return None
    return RefusedByRun(
        reason=Reason.WORKFLOW_RUN_TERMINAL,
        detail=f"run {first.run_id} ended before it came to dispatch {first.dispatch_id}",
        dispatch_id=first.dispatch_id,
        run_id=first.run_id,
        deployment_id=first.deployment_id,
        seq=first.seq,
    )


def _attempt(tx: Tx, triggers: Sequence[Trigger]) -> tuple[list[Receipt], set[str]]:
    batch = _Batch(time.time())
    tx.execute(_SAVEPOINT)
    try:
        batch.load(tx, triggers)
        receipts = [batch.decide(t) for t in triggers]
        batch.write(tx)
    except StoreConflict:
        tx.execute(_ROLLBACK_TO)
        tx.execute(_RELEASE)
        raise
    tx.execute(_RELEASE)
    return receipts, batch.woken


def accept_triggers(tx: Tx, triggers: Sequence[Trigger]) -> tuple[list[Outcome], set[str]]:
    """Accept or reject each trigger in order, inside the caller's write transaction.

    Returns one outcome per trigger (a receipt, or a :class:`HubError` for a
    trigger that could not be stored) and the ids of the deployments that got
    new dispatches. Nothing is committed here: the caller commits, and only
    then may it tell anyone "accepted".
    """
    try:
        receipts, woken = _attempt(tx, triggers)
        return list(receipts), woken
    except StoreConflict as exc:
        if len(triggers) == 1:
            return [AcceptFailed(f"trigger not stored: {exc}")], set()
    outcomes: list[Outcome] = []
    woken = set()
    for trigger in triggers:
        try:
            one, more = _attempt(tx, [trigger])
        except StoreConflict as exc:
            outcomes.append(AcceptFailed(f"trigger not stored: {exc}"))
            continue
        outcomes.extend(one)
        woken |= more
    return outcomes, woken
