"""What the hub keeps of the past: a bounded history per run, bounded dead letters.

The hub is the system of record for what it must answer: every dispatch row
(a retried mail gets its first receipt), every event id (a resent event is
recognised), each run's latest state (on ``workflow_run``). What it keeps
besides is history, and history is bounded:

- ``run_event``: the ``run_history`` latest events of each run keep their
  payload; older ones keep their row (id, kind, time) without it, so a resent
  event is still recognised by its id and applies nothing. Trimmed in the
  ingest transaction, for the runs it touched, through an index of the rows
  that still hold a payload, so the cost is that history, not the run's past
  (the store's ``trim_history``). A processed dispatch keeps its inline body
  while its DispatchProcessed keeps its payload (replay calls the handler
  with it, docs/replay.md), and loses it with that payload.
- ``dead_letter``: what could not be used, kept where an operator looks.
  Each source (``source`` and the deployment that sent it; NULL on a shared
  subject, where anyone may publish) is rate limited (a token bucket in
  memory) and keeps its ``per_source`` latest letters; the table keeps its
  ``total`` latest (the store's ``keep_dead_letter``). What a limit drops is
  counted (``GET /metrics``).
  Quarantined envelopes are exempt: each is a dispatch the hub cancelled,
  bounded by the mail a deployment got, and counted on the deployment.
- ``change``: the feed ``GET /events`` streams keeps its ``changes`` newest
  rows, trimmed by the blob collector's loop (every ``gc_interval``), in
  short transactions; a client that fell further behind is told (``reset``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial

from runtime import Message
from runtime.config import DEFAULT_RUN_HISTORY

from ..store import DEFAULT_CHANGES_KEPT, DeadLetter, Store, Tx, keep_dead_letter


@dataclass(frozen=True)
class RetentionConfig:
    run_history: int = DEFAULT_RUN_HISTORY
    """Events per run that keep their payload (0: none, only their ids)."""
    dead_letters: int = 10_000
    """Dead letters kept in all (the oldest go first)."""
    dead_letters_per_source: int = 1_000
    dead_letter_rate: float = 1.0
    """Dead letters per second a source may add, once its burst is spent."""
    dead_letter_burst: int = 60
    garbage_bytes: int = 16 * 1024
    """What is kept of a frame that does not decode: enough to tell what it was."""
    free_bytes_kept: int = 16 * 1024 * 1024
    """Free pages hub.db keeps for new blobs; beyond twice this the rest is
    given back to the file system (after each blob collection)."""
    changes: int = DEFAULT_CHANGES_KEPT
    """Rows of the change feed kept (``GET /events``; the oldest go first)."""


log = logging.getLogger("mailrun.hub.retention")


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp


class DeadLetters:
    """Keeps dead letters within the limits of a :class:`RetentionConfig`."""

    MAX_SOURCES = 10_000
    """Sources whose rate is tracked at once (the longest idle is forgotten:
    it starts again with a full burst)."""

    def __init__(self, config: RetentionConfig | None = None) -> None:
        self._config = config or RetentionConfig()
        self._buckets: OrderedDict[tuple[str, str | None], _Bucket] = OrderedDict()
        # admit() and keep() run on the loop and inside write transactions,
        # whose bodies may run on a worker thread (the store's transact).
        self._guard = threading.Lock()
        self.rate_limited = 0
        """Letters not kept because their source was over its rate (a metric)."""
        self.trimmed = 0
        """Letters deleted to stay within the caps (a metric)."""

    def admit(self, source: str, deployment_id: str | None) -> bool:
        """Whether a letter of this source may be kept now; counts a refusal."""
        with self._guard:
            return self._admit(source, deployment_id)

    def _admit(self, source: str, deployment_id: str | None) -> bool:
        config, now = self._config, time.monotonic()
        key = (source, deployment_id)
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            bucket = _Bucket(float(config.dead_letter_burst), now)
        bucket.tokens = min(
            float(config.dead_letter_burst),
            bucket.tokens + (now - bucket.stamp) * config.dead_letter_rate,
        )
        bucket.stamp = now
        self._buckets[key] = bucket  # most recently used last
        while len(self._buckets) > self.MAX_SOURCES:
            self._buckets.popitem(last=False)
        if bucket.tokens < 1.0:
            self.rate_limited += 1
            return False
        bucket.tokens -= 1.0
        return True

    def keep(self, tx: Tx, letter: DeadLetter) -> None:
        """Inside the caller's write transaction: keep ``letter`` (admitted
        already) and trim its source and the table to their caps."""
        config = self._config
        trimmed = keep_dead_letter(tx, letter, config.dead_letters_per_source, config.dead_letters)
        if trimmed:
            with self._guard:
                self.trimmed += trimmed

    def forget(self, deployment_id: str) -> None:
        """A deleted deployment's sources are not tracked any longer."""
        for key in [k for k in self._buckets if k[1] == deployment_id]:
            del self._buckets[key]

    def metrics(self) -> str:
        """``GET /metrics``'s dead letter family (Prometheus text)."""
        name = "mailrun_dead_letters_dropped_total"
        return (
            f"# HELP {name} Dead letters not kept (rate_limit: their source sent too many;"
            " cap: the oldest, deleted to stay within the caps) since the hub started.\n"
            f"# TYPE {name} counter\n"
            f'{name}{{why="rate_limit"}} {self.rate_limited}\n'
            f'{name}{{why="cap"}} {self.trimmed}\n'
        )


@dataclass(frozen=True)
class Garbage:
    """Frames that do not decode, kept as dead letters within the retention
    limits: anyone who may publish on a subject may send them."""

    store: Store
    letters: DeadLetters
    keep_bytes: int

    async def keep(self, source: str, message: Message, sender: str | None, reason: str) -> None:
        if not self.letters.admit(source, sender):
            return  # counted; the frame was answered all the same
        letter = DeadLetter(
            source, message.subject, reason[:1000], message.data[: self.keep_bytes], sender,
            time.time(),
        )  # fmt: skip
        try:
            await self.store.transact(partial(self.letters.keep, letter=letter))
        except Exception:
            log.exception("cannot keep a dead letter from %s", source)
