"""The one read-or-mint function every trigger path calls.

:func:`accept_triggers` runs inside a write transaction its caller holds
(``BEGIN IMMEDIATE``: no other writer exists until it commits). It reads
what a batch needs in a handful of queries, decides each trigger in order in
memory, then writes the outcome in a few statements (:mod:`hub.store.bulk`).
A trigger that trips an unexpected constraint is retried alone under a
SAVEPOINT, so it fails by itself and never takes its batch mates with it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from runtime import (
    INLINE_BODY_LIMIT,
    Connection,
    Reason,
    RunStatus,
    accepts_trigger,
    anchor_is_live,
    new_id,
)

from .._errors import AcceptFailed
from .bulk import insert_rows
from .reads import fetch_all, is_postgres
from .schema import ApprovalStatus, DispatchStatus
from .triggers import Accepted, Outcome, Receipt, RefusedByRun, Rejected, Trigger, body_digest

__all__ = [
    "Accepted",
    "Outcome",
    "Receipt",
    "RefusedByRun",
    "Rejected",
    "Trigger",
    "accept_triggers",
    "body_digest",
]


_DEPLOYMENTS = """SELECT d.id, d.address, a.status, d.next_seq, d.version FROM deployment d
JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1 WHERE {where}
ORDER BY d.deleted_at IS NULL, d.created_at, d.id"""  # live rows last: they win per address
# The anchor lock on PostgreSQL, where hubs accept at once: the deployment
# rows, locked in one order (no deadlock between two batches), read as the
# last commit left them; what the batch reads next (the top-level run, the
# message ids) is read after the lock, so it is the last commit's too. On
# SQLite, BEGIN IMMEDIATE already holds every row.
_LOCKED = " FOR UPDATE OF d"

_BLOB = "INSERT OR IGNORE INTO blob (digest, size, data, created_at) VALUES (?, ?, ?, ?)"
# With several hubs, another hub's blob collection may be deciding that a
# blob is unused while this batch names it again: the upsert locks the row
# and makes it new, and collection spares new blobs (hub/wire/blobs.py).
_BLOB_PG = (
    "INSERT INTO blob (digest, size, data, created_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (digest) DO UPDATE SET created_at = EXCLUDED.created_at"
)


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _any_of(*columns: tuple[str, Sequence[object]]) -> str:
    """``column IN (?, ...)`` for each column with values, joined by OR. An
    empty ``IN ()`` beside an OR keeps SQLite from searching the indexes of
    the others: it read the whole table instead."""
    return " OR ".join(f"{name} IN ({_marks(len(values))})" for name, values in columns if values)


def prior_dispatches_sql(n: int) -> str:
    """The dispatches of one deployment (the first parameter) with any of
    ``n`` message ids (the rest): what a retry is answered from.

    One deployment at a time, so that SQLite searches the (deployment_id,
    message_id) index; a row-value ``IN (VALUES ...)`` over several
    deployments read the whole table for every batch."""
    return (
        "SELECT id, run_id, deployment_id, seq, message_id, status, last_error,"
        " kind, sender, subject, body, COALESCE(body_digest, inline_digest), body_size"
        f" FROM workflow_run_dispatch WHERE deployment_id = ? AND message_id IN ({_marks(n)})"
    )


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
        self.new_runs: list[tuple[object, ...]] = []
        self.blobs: list[tuple[object, ...]] = []
        self.dispatches: list[tuple[object, ...]] = []
        self.decided: list[tuple[object, ...]] = []

    async def load(self, db: Connection, triggers: Sequence[Trigger]) -> None:
        approval_ids = sorted({t.approval_id for t in triggers if t.approval_id})
        await self._load_approvals(db, approval_ids)
        addresses = sorted({t.address for t in triggers if t.address and not t.deployment_id})
        dep_ids = sorted({t.deployment_id for t in triggers if t.deployment_id}
                         | {a[1] for a in self.approvals.values()})  # fmt: skip
        if addresses or dep_ids:
            where = _any_of(("d.address", addresses), ("d.id", dep_ids))
            sql = _DEPLOYMENTS.format(where=where)
            locking = is_postgres(db)
            for row in await fetch_all(db, sql + (_LOCKED if locking else ""), addresses + dep_ids):
                self.deps[row[0]] = _Deployment(*row)
                self.addresses[row[1]] = row[0]
            if locking:
                # Decided by another hub while this batch waited for the lock?
                await self._load_approvals(db, approval_ids)
        if not self.deps:
            return
        deps = sorted(self.deps)
        run_ids = sorted({t.run_id for t in triggers if t.run_id})
        run_ids += [a[0] for a in self.approvals.values()]
        top_level = f"(is_top_level = 1 AND deployment_id IN ({_marks(len(deps))}))"
        named = f" OR id IN ({_marks(len(run_ids))})" if run_ids else ""
        for run_id, dep_id, status, top, unstarted in await fetch_all(
            db,
            "SELECT id, deployment_id, status, is_top_level,"
            " parent_run_id IS NOT NULL AND entrypoint IS NULL"
            f" FROM workflow_run WHERE is_anchor = 0 AND ({top_level}{named})",
            [*deps, *run_ids],
        ):
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
            for dsp, run_id, _, seq, mid, status, error, *content in await fetch_all(
                db, prior_dispatches_sql(len(message_ids)), [dep_id, *sorted(message_ids)]
            ):
                first = Accepted(
                    dispatch_id=dsp, run_id=run_id, deployment_id=dep_id, seq=seq, duplicate=True
                )
                answer = _refused(first, status, error) or first
                self.seen[(dep_id, mid)] = (_Content.stored(content), answer)

    async def _load_approvals(self, db: Connection, approval_ids: list[str]) -> None:
        if approval_ids:
            for approval_id, run_id, dep_id, status in await fetch_all(
                db,
                "SELECT a.id, a.run_id, r.deployment_id, a.status FROM approval a JOIN"
                f" workflow_run r ON r.id = a.run_id WHERE a.id IN ({_marks(len(approval_ids))})",
                approval_ids,
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
                (run_id, dep_id, 0, 1, RunStatus.RUNNING.value, self.now, self.now)
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
            (
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

    async def write(self, db: Connection) -> None:
        await insert_rows(
            db,
            "INSERT INTO workflow_run (id, deployment_id, is_anchor, is_top_level, status,"
            " created_at, updated_at)",
            self.new_runs,
        )
        await db.executemany(_BLOB_PG if is_postgres(db) else _BLOB, self.blobs)
        await insert_rows(
            db,
            "INSERT INTO workflow_run_dispatch (id, deployment_id, run_id, seq, kind, message_id,"
            " sender, subject, body, body_digest, body_size, status, created_at, version,"
            " raw_digest, raw_size)",
            self.dispatches,
        )
        await db.executemany(
            "UPDATE deployment SET next_seq = ? WHERE id = ?",
            [(self.deps[d].next_seq, d) for d in sorted(self.woken)],
        )
        await db.executemany(
            "UPDATE approval SET status = ?, decision = ?, decided_at = ? WHERE id = ?",
            self.decided,
        )


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


async def _attempt(db: Connection, triggers: Sequence[Trigger]) -> tuple[list[Receipt], set[str]]:
    batch = _Batch(time.time())
    await db.execute("SAVEPOINT accept")
    try:
        await batch.load(db, triggers)
        receipts = [batch.decide(t) for t in triggers]
        await batch.write(db)
    except sqlite3.IntegrityError:
        await db.execute("ROLLBACK TO accept")
        await db.execute("RELEASE accept")
        raise
    await db.execute("RELEASE accept")
    return receipts, batch.woken


async def accept_triggers(
    db: Connection, triggers: Sequence[Trigger]
) -> tuple[list[Outcome], set[str]]:
    """Accept or reject each trigger in order, inside the caller's write transaction.

    Returns one outcome per trigger (a receipt, or a :class:`HubError` for a
    trigger that could not be stored) and the ids of the deployments that got
    new dispatches. Nothing is committed here: the caller commits, and only
    then may it tell anyone "accepted".
    """
    try:
        receipts, woken = await _attempt(db, triggers)
        return list(receipts), woken
    except sqlite3.IntegrityError as exc:
        if len(triggers) == 1:
            return [AcceptFailed(f"trigger not stored: {exc}")], set()
    outcomes: list[Outcome] = []
    woken = set()
    for trigger in triggers:
        try:
            one, more = await _attempt(db, [trigger])
        except sqlite3.IntegrityError as exc:
            outcomes.append(AcceptFailed(f"trigger not stored: {exc}"))
            continue
        outcomes.extend(one)
        woken |= more
    return outcomes, woken
