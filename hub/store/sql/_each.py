"""Several bodies in one write transaction, each in a savepoint of its own:
one commit (one fsync) for all, and a body that raises takes back only what
it wrote (``each_in_savepoint``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from ._statement import sql
from ._tx import Tx

T = TypeVar("T")

_SAVEPOINT = sql("SAVEPOINT each")
_RELEASE = sql("RELEASE each")
_ROLLBACK_TO = sql("ROLLBACK TO each")


def each_in_savepoint(tx: Tx, bodies: Sequence[Callable[[Tx], T]]) -> list[T | Exception]:
    """Run ``bodies`` in order inside ``tx``; per body its result, or the
    exception it raised (its writes rolled back, the others' kept).

    An error that the savepoint cannot take back (the database rolled the
    whole transaction back: a full disk, an I/O error) is raised: nothing of
    any body is then committed.
    """
    results: list[T | Exception] = []
    for body in bodies:
        tx.execute(_SAVEPOINT)
        try:
            result: T | Exception = body(tx)
        except Exception as exc:
            tx.execute(_ROLLBACK_TO)
            result = exc
        tx.execute(_RELEASE)
        results.append(result)
    return results
