"""Stuck deliveries: a dispatch delivered but never processed is sent again.

An Ack of ``stored`` makes a dispatch ``delivered``; the DispatchProcessed
that should follow may still never come: the Ack was forged, or the inbox
that stored the envelope is gone (a crash on a copied inbox, a restored
backup). Nothing else would ever send it again (only an owner epoch change
resets ``delivered`` rows), and since the sidecar processes a deployment's
envelopes in seq order, everything behind it waits too.

So a sweep (the dispatcher's, with the store's ``find_overdue`` and
``put_back``) puts back to ``reserved`` every dispatch delivered more than
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
from functools import partial

from runtime import afailpoint

from ...store import Overdue, Store, put_back


async def send_again(store: Store, overdue: list[Overdue]) -> list[Overdue]:
    """Put ``overdue`` back to reserved, each only as it was read (the
    store's ``put_back``); the ones that still matched and will be sent again."""
    if not overdue:
        return []
    # Read, not yet written: a dispatch processed now must be left alone.
    await afailpoint("hub.redeliver.before_put_back")
    return await store.transact(partial(put_back, overdue=overdue))


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
