"""Triggers accepted in groups, some of them all or none (the recipients of
one SMTP message): each such group under a savepoint, rolled back unless
every trigger of it is accepted."""

from __future__ import annotations

from collections.abc import Sequence

from ..sql import Tx, sql
from .accept import accept_triggers
from .triggers import WITH_OTHERS, Accepted, Outcome, Rejected, Trigger

_SAVEPOINT = sql("SAVEPOINT whole")
_RELEASE = sql("RELEASE whole")
_ROLLBACK_TO = sql("ROLLBACK TO whole")

Group = tuple[Sequence[Trigger], bool]
"""Triggers, and whether they are accepted all or none."""


def accept_groups(tx: Tx, groups: Sequence[Group]) -> tuple[list[Outcome], set[str]]:
    """``accept_triggers`` for each group in order, inside the caller's
    transaction: one outcome per trigger, and the deployments to wake. A
    group taken whole whose triggers are not all accepted leaves nothing: its
    accepted ones are answered ``with_others`` instead."""
    outcomes: list[Outcome] = []
    woken: set[str] = set()
    for triggers, whole in groups:
        if not whole:
            got, more = accept_triggers(tx, triggers)
        else:
            tx.execute(_SAVEPOINT)
            got, more = accept_triggers(tx, triggers)
            if all(isinstance(o, Accepted) for o in got):
                tx.execute(_RELEASE)
            else:
                tx.execute(_ROLLBACK_TO)
                tx.execute(_RELEASE)
                more = set()
                detail = "not accepted: another of the same message was not"
                got = [
                    Rejected(reason=WITH_OTHERS, detail=detail) if isinstance(o, Accepted) else o
                    for o in got
                ]
        outcomes += got
        woken |= more
    return outcomes, woken
