"""Deliveries that never got processed, found and put back to ``reserved``.

A dispatch delivered (acknowledged ``stored``) may still never be
processed: the ack was forged, or the inbox that stored it is gone. Which
ones to send again, and how often, is the wire's policy
(``hub.wire.redelivery``); here they are found, only among each live
deployment's head (the ``window`` seqs from its lowest open one, reserved
or delivered), and put back by a conditional UPDATE each. A run waiting on
an approval, or suspended, holds its items on purpose (the classifier's
``holds_items``): its dispatches are never overdue, except what ends the
hold (an approval decision, a ``resume``, a ``cancel``). Nor are a paused
deployment's: they are sent again, if need be, once it is unpaused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import msgspec

from runtime import RunStatus
from runtime.wire import holds_items

from ..schema import DispatchStatus
from ..sql import Tx, sql

_HELD = tuple(s.value for s in RunStatus if holds_items(s))
_NO_SEQ = 2**62  # above any seq, and no overflow when the window is added


class Overdue(NamedTuple):
    """A dispatch delivered more than the bound ago and not processed."""

    dispatch_id: str
    deployment_id: str
    seq: int
    delivered_at: float


# Driven by the live deployments, each an index range of dispatch_pending
# (deployment_id, status, seq): the cost is the number of live deployments
# times ``window``, however many dispatches the table holds. The head is
# counted from the lowest open seq, reserved or delivered, so a head just
# put back (reserved until its lane sends it) still covers the seqs behind
# it: they are never mistaken for the head meanwhile. The held statuses
# have the classifier's fixed number: declared once, at import.
_HELD_NAMES = ", ".join(f":held{i}" for i in range(len(_HELD)))
_HELD_MARKS = ", ".join("?" * len(_HELD))


# The statuses written out, not bound: SQLite compiles a statement that binds
# one again at every run (the table's partial index on a status; docs/hub.md).
_DELIVERED, _RESERVED = DispatchStatus.DELIVERED.value, DispatchStatus.RESERVED.value


def _overdue(smaller: str) -> str:
    """The query, with the scalar minimum of two as each database spells it."""
    return f"""
SELECT d.id, d.deployment_id, d.seq, d.delivered_at
FROM deployment dep CROSS JOIN workflow_run_dispatch d
LEFT JOIN workflow_run r ON r.id = d.run_id
WHERE dep.deleted_at IS NULL AND dep.paused_at IS NULL
  AND d.deployment_id = dep.id AND d.status = '{_DELIVERED}'
  AND d.seq < :window + {smaller}(
        COALESCE((SELECT MIN(x.seq) FROM workflow_run_dispatch x
                  WHERE x.deployment_id = dep.id AND x.status = '{_RESERVED}'), {_NO_SEQ}),
        COALESCE((SELECT MIN(x.seq) FROM workflow_run_dispatch x
                  WHERE x.deployment_id = dep.id AND x.status = '{_DELIVERED}'), {_NO_SEQ}))
  AND d.delivered_at < :before
  AND (r.status IS NULL OR r.status NOT IN ({_HELD_NAMES})
       OR d.kind IN ('approval', 'resume', 'cancel'))
ORDER BY d.deployment_id, d.seq
"""


OVERDUE = sql(_overdue("MIN"), postgres=_overdue("LEAST"))
"""The overdue deliveries' query (its plan is checked by the wire's tests)."""

# Matches only the row as it was read: still delivered, by that very
# delivery, and its run not holding it meanwhile. A dispatch processed (or
# delivered again) between the read and this write is left alone.
_PUT_BACK = sql(f"""
UPDATE workflow_run_dispatch SET status = ?, delivered_at = NULL
WHERE id = ? AND status = ? AND delivered_at = ?
  AND (kind IN ('approval', 'resume', 'cancel') OR NOT EXISTS (SELECT 1 FROM workflow_run r
                  WHERE r.id = workflow_run_dispatch.run_id AND r.status IN ({_HELD_MARKS})))
""")
_STILL_OPEN = sql(
    "SELECT id FROM workflow_run_dispatch"
    " WHERE id IN (SELECT value FROM json_each(?)) AND status IN (?, ?)",
    postgres="SELECT id FROM workflow_run_dispatch"
    " WHERE id IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))"
    " AND status IN (?, ?)",
)


def overdue_params(window: int, before: float) -> dict[str, object]:
    """:data:`OVERDUE`'s parameters."""
    return {
        "window": window,
        "before": before,
        **{f"held{i}": status for i, status in enumerate(_HELD)},
    }


def find_overdue(tx: Tx, window: int, before: float) -> list[Overdue]:
    """The dispatches delivered before ``before`` and not processed, among the
    ``window`` seqs from each live deployment's lowest open one, in seq order."""
    rows = tx.fetch_all(OVERDUE, overdue_params(window, before))
    return [Overdue(*row) for row in rows]


def put_back(tx: Tx, overdue: Sequence[Overdue]) -> list[Overdue]:
    """Make ``overdue`` reserved again, each by one conditional UPDATE; the
    ones that still matched (and will be sent again)."""
    done: list[Overdue] = []
    for row in overdue:
        params = (
            DispatchStatus.RESERVED,
            row.dispatch_id,
            DispatchStatus.DELIVERED,
            row.delivered_at,
            *_HELD,
        )
        if tx.execute(_PUT_BACK, params) == 1:
            done.append(row)
    return done


def still_open(tx: Tx, dispatch_ids: Iterable[str]) -> set[str]:
    """Those of ``dispatch_ids`` not yet processed (nor cancelled)."""
    ids = msgspec.json.encode(list(dispatch_ids)).decode()
    params = (ids, DispatchStatus.RESERVED, DispatchStatus.DELIVERED)
    return {row[0] for row in tx.fetch_all(_STILL_OPEN, params)}
