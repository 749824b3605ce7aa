"""Group commit: one write transaction for every trigger waiting at that moment.

Callers hand requests to the :class:`Acceptor`, whose loop
(``hub.store.Batches``: a bounded mailbox, so a full queue makes callers
wait) takes the first request and whatever else is already waiting (up to
``max_batch`` triggers). What is the Acceptor's own: it runs
:func:`accept_triggers` over all of them in one transaction, and answers
each caller only after COMMIT returned. A failed commit answers every
caller of the batch with :class:`StoreUnavailable`: never a receipt that
the store does not hold.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from inspect import isawaitable

import anyio
import anyio.abc

from runtime import afailpoint, tracing
from runtime.failpoints import failpoint

from .._errors import HubError, StoreConflict, StoreUnavailable
from ..metrics import HubMetrics
from ..store import (
    Accepted,
    Batches,
    Outcome,
    Pending,
    Receipt,
    Rejected,
    Store,
    Trigger,
    Tx,
    accept_alone,
    accept_groups,
    accept_triggers,
    conflict_outcome,
)

log = logging.getLogger("mailrun.hub.accept")

HEAVY_BYTES = 1 << 20
"""A batch carrying more bytes of bodies than this commits off the event
loop's thread (``Store.transact``'s ``heavy``): writing it takes long enough
to hold up every request meanwhile."""


OnAccepted = Callable[[set[str]], object]
"""Called after each commit with the deployments that got new dispatches;
may return an awaitable. Keep it quick: the next batch waits for it."""


class _Request(Pending[list[Outcome]]):
    __slots__ = ("trace", "triggers", "whole")

    def __init__(self, triggers: Sequence[Trigger], whole: bool, trace: object) -> None:
        super().__init__(len(triggers))
        self.triggers = triggers
        self.whole = whole
        self.trace = trace
        """The caller's trace context, when tracing (``tracing.spans.current()``)."""


class Acceptor:
    """The single entry point for triggers; run :meth:`run` in a task group."""

    def __init__(
        self,
        store: Store,
        *,
        on_accepted: OnAccepted | None = None,
        max_batch: int = 256,
        queue_size: int = 1024,
        metrics: HubMetrics | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self.on_accepted = on_accepted
        self._batches: Batches[_Request] = Batches(
            self._commit, max_batch=max_batch, queue_size=queue_size
        )
        self.counts: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()

    async def accept(self, trigger: Trigger) -> Receipt:
        """Accept one trigger; raise :class:`HubError` when it could not be stored."""
        (outcome,) = await self.accept_many([trigger])
        if isinstance(outcome, HubError):
            raise outcome
        return outcome

    async def accept_many(
        self, triggers: Sequence[Trigger], *, whole: bool = False
    ) -> list[Outcome]:
        """Accept triggers in order, in one transaction; one outcome per trigger.

        With ``whole``, all of them or none (the recipients of one SMTP
        message): if any is not accepted, none is stored, and those that
        would have been are answered ``Rejected(reason=WITH_OTHERS)``."""
        if tracing.on:
            with tracing.spans.accepting(len(triggers)):
                return await self._accept_many(triggers, whole, tracing.spans.current())
        return await self._accept_many(triggers, whole)

    async def _accept_many(
        self, triggers: Sequence[Trigger], whole: bool, trace: object = None
    ) -> list[Outcome]:
        request = _Request(triggers, whole, trace)
        began = time.monotonic()
        await self._batches.ask(request)
        assert request.result is not None
        if self._metrics is not None:
            self._metrics.accept_seconds.observe(time.monotonic() - began)
        return request.result

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve requests until cancelled; pending callers then get HubShuttingDown."""
        await self._batches.run(task_status=task_status)

    async def _commit(self, batch: list[_Request]) -> None:
        triggers = [t for request in batch for t in request.triggers]
        # One trigger alone in its transaction (a lone mail): no savepoint,
        # its conflict rolls back the transaction, which holds nothing else.
        alone = len(triggers) == 1 and not batch[0].whole

        def body(tx: Tx) -> tuple[list[Outcome], set[str]]:
            if alone:
                accepted = accept_alone(tx, triggers[0])
            elif any(request.whole for request in batch):
                accepted = accept_groups(tx, [(r.triggers, r.whole) for r in batch])
            else:
                accepted = accept_triggers(tx, triggers)
            failpoint("hub.accept.before_commit")
            return accepted

        try:
            heavy = sum(len(t.body) + len(t.raw or b"") for t in triggers) > HEAVY_BYTES
            try:
                outcomes, woken = await self._store.transact(body, heavy=heavy)
            except StoreConflict as exc:
                if not alone:
                    raise
                # Answered as accept_triggers answers it: this trigger failed.
                outcomes, woken = [conflict_outcome(exc)], set()
        except Exception as exc:
            # Whatever broke the transaction, it rolled back: nobody in this
            # batch is accepted, and the loop lives on for the next batch.
            if isinstance(exc, HubError):
                error = exc
                log.error("accept batch of %d failed: %s", len(triggers), exc.detail)
            else:
                error = StoreUnavailable(f"store error: {exc}")
                log.exception("accept batch of %d failed", len(triggers))
            self.counts["failed"] += len(triggers)
            for request in batch:
                request.finish(None, error)
            return
        # Committed, nobody answered yet: a crash here leaves clients
        # indeterminate, and a retry with the same message id must get this
        # very receipt. (Unset, the failpoint returns without a checkpoint.)
        await afailpoint("hub.accept.after_commit")
        # Answer before anything else awaits: the batch is committed, and a
        # cancellation arriving now must not turn its receipts into errors.
        at = 0
        for request in batch:
            request.finish(outcomes[at : at + len(request.triggers)])
            at += len(request.triggers)
            if request.trace is not None:  # before the dispatcher sends them
                tracing.spans.keep_accepted(request.trace, _new(request.result))
        self._count(outcomes)
        if woken and self.on_accepted is not None:
            try:
                result = self.on_accepted(woken)
                # Most callbacks return None: no ABC check for them. A lone
                # caller commits in its own task (hub.store.Batches): its
                # cancellation must not cut the wake of what it committed.
                if result is not None and isawaitable(result):
                    with anyio.CancelScope(shield=True):
                        await result
            except Exception:
                log.exception("on_accepted callback failed")

    def _count(self, outcomes: list[Outcome]) -> None:
        self.counts["batches"] += 1
        for outcome in outcomes:
            if isinstance(outcome, Accepted):
                self.counts["duplicate" if outcome.duplicate else "accepted"] += 1
                if self._metrics is not None and not outcome.duplicate:
                    self._metrics.accepted.inc(outcome.deployment_id)
            elif isinstance(outcome, Rejected):
                self.rejected[outcome.reason] += 1
            else:
                self.counts["failed"] += 1


def _new(outcomes: list[Outcome] | None) -> list[str]:
    """The dispatches these outcomes accepted for the first time."""
    return [o.dispatch_id for o in outcomes or () if isinstance(o, Accepted) and not o.duplicate]
