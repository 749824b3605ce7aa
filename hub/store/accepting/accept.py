"""The one read-or-mint function every trigger path calls.

:func:`accept_triggers` runs inside a write transaction its caller holds
(``BEGIN IMMEDIATE`` on SQLite: no other writer exists until it commits;
on PostgreSQL the batch's deployment rows locked, ``lookups.py``). It reads
what a batch needs in a handful of queries, decides each trigger in order in
memory (``batch.py``), then writes the outcome in a few statements
(``rows.py``). A trigger that trips an unexpected constraint
(``StoreConflict``) is retried alone under a SAVEPOINT, so it fails by
itself and never takes its batch mates with it. A transaction that holds
one trigger and nothing else (a lone mail's) needs no savepoint:
:func:`accept_alone` lets the conflict roll the whole transaction back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..._errors import AcceptFailed, StoreConflict
from ..sql import Tx, sql
from .batch import Batch
from .triggers import Outcome, Receipt, Trigger

_SAVEPOINT = sql("SAVEPOINT accept")
_RELEASE = sql("RELEASE accept")
_ROLLBACK_TO = sql("ROLLBACK TO accept")


def _attempt(tx: Tx, triggers: Sequence[Trigger]) -> tuple[list[Receipt], set[str]]:
    batch = Batch(time.time())
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


def accept_alone(tx: Tx, trigger: Trigger) -> tuple[list[Outcome], set[str]]:
    """:func:`accept_triggers` for a transaction that holds ``trigger`` and
    nothing else: no savepoint around it, since a constraint it trips
    (``StoreConflict``, raised) rolls back the whole transaction, which
    leaves what a savepoint would have; its caller answers it
    :func:`conflict_outcome`."""
    batch = Batch(time.time())
    batch.load(tx, [trigger])
    receipt = batch.decide(trigger)
    batch.write(tx)
    return [receipt], batch.woken


def conflict_outcome(exc: StoreConflict) -> AcceptFailed:
    """What a trigger that tripped a constraint is answered."""
    return AcceptFailed(f"trigger not stored: {exc}")


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
            return [conflict_outcome(exc)], set()
    outcomes: list[Outcome] = []
    woken = set()
    for trigger in triggers:
        try:
            one, more = _attempt(tx, [trigger])
        except StoreConflict as exc:
            outcomes.append(conflict_outcome(exc))
            continue
        outcomes.extend(one)
        woken |= more
    return outcomes, woken
