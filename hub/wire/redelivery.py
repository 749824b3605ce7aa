"""Stuck deliveries: a dispatch delivered but never processed is sent again.

An Ack of ``stored`` makes a dispatch ``delivered``; the DispatchProcessed
that should follow may still never come: the Ack was forged, or the inbox
that stored the envelope is gone (a crash on a copied inbox, a restored
backup). Nothing else would ever send it again (only an owner epoch change
resets ``delivered`` rows), and since the sidecar processes a deployment's
envelopes in seq order, everything behind it waits too.

So a sweep puts back to ``reserved`` every dispatch delivered more than
``redeliver_after`` ago and still not processed, and the lane sends it as
usual: a sidecar that has it answers ``duplicate`` (delivered again, with a
fresh ``delivered_at``), one that lost it stores it. Two limits keep this
cheap for a deployment whose handler is merely slow:

- the bound counts from the latest delivery, so a dispatch is re-sent at
  most once per bound;
- only a deployment's head is looked at: the ``window`` seqs from its lowest
  open (reserved or delivered) one. The sidecar takes dispatches in seq
  order, so the head is what holds the rest back. A slow handler with a long
  backlog costs at most ``window`` duplicate frames per bound, not the
  backlog; a lost range is recovered a window at a time, each as soon as the
  one before is processed.

A run waiting on an approval holds its items on purpose (``holds_items``):
its dispatches are never overdue, except an approval decision, which it
processes at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import msgspec

from runtime import Connection, RunStatus, afailpoint, holds_items

from ..store import DispatchStatus, Store, fetch_all

_HELD = tuple(s.value for s in RunStatus if holds_items(s))
_HELD_MARKS = ",".join("?" * len(_HELD))
_HELD_NAMES = ",".join(f":held{i}" for i in range(len(_HELD)))
_NO_SEQ = 2**62  # above any seq, and no overflow when the window is added

# Driven by the live deployments, each an index range of dispatch_pending
# (deployment_id, status, seq): the cost is the number of live deployments
# times ``window``, however many dispatches the table holds. The head is
# counted from the lowest open seq, reserved or delivered, so a head just
# put back (reserved until its lane sends it) still covers the seqs behind
# it: they are never mistaken for the head meanwhile.
_OVERDUE = f"""
SELECT d.id, d.deployment_id, d.seq, d.delivered_at
FROM deployment dep CROSS JOIN workflow_run_dispatch d
LEFT JOIN workflow_run r ON r.id = d.run_id
WHERE dep.deleted_at IS NULL
  AND d.deployment_id = dep.id AND d.status = :delivered
  AND d.seq < :window + MIN(
        COALESCE((SELECT MIN(x.seq) FROM workflow_run_dispatch x
                  WHERE x.deployment_id = dep.id AND x.status = :reserved), {_NO_SEQ}),
        COALESCE((SELECT MIN(x.seq) FROM workflow_run_dispatch x
                  WHERE x.deployment_id = dep.id AND x.status = :delivered), {_NO_SEQ}))
  AND d.delivered_at < :before
  AND (r.status IS NULL OR r.status NOT IN ({_HELD_NAMES}) OR d.kind = 'approval')
ORDER BY d.deployment_id, d.seq
"""

# Matches only the row as it was read: still delivered, by that very
# delivery, and its run not holding it meanwhile. A dispatch processed (or
# delivered again) between the read and this write is left alone.
_PUT_BACK = f"""
UPDATE workflow_run_dispatch SET status = ?, delivered_at = NULL
WHERE id = ? AND status = ? AND delivered_at = ?
  AND (kind = 'approval' OR NOT EXISTS (SELECT 1 FROM workflow_run r
                  WHERE r.id = workflow_run_dispatch.run_id AND r.status IN ({_HELD_MARKS})))
"""

_STILL_OPEN = """
SELECT id FROM workflow_run_dispatch
WHERE id IN (SELECT value FROM json_each(?)) AND status IN (?, ?)
"""


@dataclass(frozen=True, slots=True)
class Overdue:
    """A dispatch delivered more than the bound ago and not processed."""

    dispatch_id: str
    deployment_id: str
    seq: int
    delivered_at: float


def overdue_params(window: int, before: float) -> dict[str, object]:
    return {
        "delivered": DispatchStatus.DELIVERED.value,
        "reserved": DispatchStatus.RESERVED.value,
        "window": window,
        "before": before,
        **{f"held{i}": status for i, status in enumerate(_HELD)},
    }


async def find_overdue(store: Store, *, window: int, before: float) -> list[Overdue]:
    """The dispatches delivered before ``before`` and not processed, among the
    ``window`` seqs from each live deployment's lowest open one, in seq order."""
    params = overdue_params(window, before)
    rows = await fetch_all(store.db, _OVERDUE, params)
    return [Overdue(r[0], r[1], r[2], r[3]) for r in rows]


async def put_back(store: Store, overdue: list[Overdue]) -> list[Overdue]:
    """Make ``overdue`` reserved again, each by one conditional UPDATE; the
    ones that still matched (and will be sent again)."""
    if not overdue:
        return []
    # Read, not yet written: a dispatch processed now must be left alone.
    await afailpoint("hub.redeliver.before_put_back")

    async def body(db: Connection) -> list[Overdue]:
        done: list[Overdue] = []
        for row in overdue:
            cur = await db.execute(
                _PUT_BACK,
                (
                    DispatchStatus.RESERVED,
                    row.dispatch_id,
                    DispatchStatus.DELIVERED,
                    row.delivered_at,
                    *_HELD,
                ),
            )
            if cur.rowcount == 1:
                done.append(row)
        return done

    return await store.transact(body)


async def still_open(store: Store, dispatch_ids: Iterable[str]) -> set[str]:
    """Those of ``dispatch_ids`` not yet processed (nor cancelled)."""
    ids = msgspec.json.encode(list(dispatch_ids)).decode()
    params = (ids, DispatchStatus.RESERVED, DispatchStatus.DELIVERED)
    return {r[0] for r in await fetch_all(store.db, _STILL_OPEN, params)}


@dataclass(slots=True)
class Resent:
    """A dispatch put back for re-sending and not processed since."""

    dispatch_id: str
    deployment_id: str
    seq: int
    times: int
    first_at: float
    """When it was first put back (epoch seconds)."""


class Redeliveries:
    """What was re-sent and is not processed yet, in bounded memory.

    Only heads of deployments are ever re-sent, so this holds about
    ``window`` entries per deployment with a stuck sidecar; ``limit`` bounds
    it whatever happens (the entry re-sent longest ago is forgotten first:
    if still unprocessed it is counted again from one). An entry leaves
    when its dispatch is processed or cancelled (:meth:`keep`).
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        # Insertion order is "re-sent longest ago first": the eviction order.
        self._entries: dict[str, Resent] = {}
        self._by_dep: dict[str, dict[str, Resent]] = {}
        self.total = 0
        """Dispatches put back since the hub started (a metric)."""

    def record(self, overdue: Iterable[Overdue], now: float | None = None) -> None:
        now = time.time() if now is None else now
        for row in overdue:
            self.total += 1
            entry = self._forget(row.dispatch_id)
            if entry is None:
                entry = Resent(row.dispatch_id, row.deployment_id, row.seq, 0, now)
            entry.times += 1
            self._entries[entry.dispatch_id] = entry
            self._by_dep.setdefault(entry.deployment_id, {})[entry.dispatch_id] = entry
        while len(self._entries) > self._limit:
            self._forget(next(iter(self._entries)))

    def keep(self, open_ids: set[str]) -> None:
        """Forget every entry whose dispatch is no longer open."""
        for dispatch_id in [d for d in self._entries if d not in open_ids]:
            self._forget(dispatch_id)

    def forget(self, deployment_id: str) -> None:
        """Every entry of a deleted deployment."""
        for dispatch_id in list(self._by_dep.get(deployment_id, {})):
            self._forget(dispatch_id)

    def of(self, deployment_id: str) -> list[Resent]:
        return list(self._by_dep.get(deployment_id, {}).values())

    def _forget(self, dispatch_id: str) -> Resent | None:
        entry = self._entries.pop(dispatch_id, None)
        if entry is not None:
            mine = self._by_dep[entry.deployment_id]
            del mine[dispatch_id]
            if not mine:
                del self._by_dep[entry.deployment_id]
        return entry

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Resent]:
        return iter(list(self._entries.values()))

    def ids(self) -> list[str]:
        return list(self._entries)
