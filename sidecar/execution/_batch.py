"""One batch of a run's items as the run actor takes it: the commit it
builds, the run as the batch moves it, and what taking each item did.

Every item of a batch is taken one way (:class:`Step`): set aside as
unreadable, refused because the run has ended, refused because a child's
parent has ended (the child is cancelled), held while the run waits for an
approval or is suspended, a ``resume`` (never shown to the handler, it may
end the batch: the rows the suspension held come next), a ``cancel`` that
terminates (the run ends ``cancelled``, unseen by the handler), processed by
the handler (a ``cancel`` among them: the run ends ``cancelled`` whatever the
call did), which may end the batch (a decision that opens the run's gate: the
rows it held come next), or, once the handler failed on it past the retry
budget, given up by the deployment's failure policy (parked, the run
suspended, or the run failed). Each way records in the :class:`Batch` what
the commit writes: the row's outcome, the events (encoded once, as the
outbox keeps them) and the run's status and state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

from runtime import (
    DispatchOutcome,
    Event,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    RunStatus,
    is_terminal,
    new_id,
)
from runtime.wire import RunSuspended

from ..storage import DEAD_LETTER, Commit, Outgoing, Pending, outgoing, processed
from ._context import Context, check_encoded, to_json
from ._state import Snapshot


class Step(Enum):
    """What taking one item did."""

    QUARANTINED = "quarantined"
    """Unreadable: set aside as a dead letter, and the hub told."""
    REFUSED = "refused"
    """The run had ended: consumed as ``refused_terminal``."""
    CANCELLED = "cancelled"
    """A child's start whose parent had ended: refused, the child cancelled."""
    HELD = "held"
    """The run waits for an approval, or is suspended: kept for after the
    decision, or the resume."""
    PROCESSED = "processed"
    """The handler's call, committed with the batch."""
    GATE_OPENED = "gate_opened"
    """Processed, and it was the last decision the run waited for: the batch
    ends here, so that the rows the gate held come next."""
    RESUMED = "resumed"
    """A ``resume`` took the run out of suspension: the batch ends here, so
    that the rows the suspension held come next, the failing one first."""
    TERMINATED = "terminated"
    """A ``cancel`` ended the run without the handler: it terminated it, or
    the handler failed on it past the retry budget."""
    GIVEN_UP = "given_up"
    """The handler failed on it past the retry budget: parked, or the run
    suspended or failed, by the deployment's policy."""


@dataclass(slots=True)
class Batch:
    """The commit a batch builds, and the run as the batch has moved it."""

    commit: Commit
    status: str | None
    """The run's status (None: it has not started)."""
    state: Snapshot
    """The run's state after the items taken so far."""
    ran: int
    """The workflow version that processed the run's latest item (0: none)."""
    began: float = field(default_factory=time.monotonic)

    @property
    def ended(self) -> bool:
        return self.status is not None and is_terminal(self.status)

    @property
    def waiting(self) -> bool:
        return self.status == RunStatus.WAITING

    @property
    def suspended(self) -> bool:
        return self.status == RunStatus.SUSPENDED

    def _started(self, at: float) -> list[Outgoing]:
        """RunStarted, if the run has not started: the item makes it start."""
        if self.status is not None:
            return []
        self.status = RunStatus.RUNNING
        return [outgoing(RunStarted(event_id=new_id("evt"), run_id=self.commit.run_id, at=at))]

    def _step(self) -> int:
        self.commit.steps = (self.commit.steps or 0) + 1
        return self.commit.steps

    def over_budget(self, budget: float) -> bool:
        """Whether the batch has handled items for ``budget`` seconds (at
        least one consumed): the rest waits for the next step."""
        return bool(self.commit.consumed) and time.monotonic() - self.began >= budget

    def consume(self, p: Pending, outcome: str, events: list[Outgoing]) -> None:
        # A held row is behind the processing position: no seq for it.
        self.commit.consumed.append((p.dispatch_id, None if p.held else p.seq, outcome))
        self.commit.events.extend(events)

    def quarantine(self, p: Pending, event: Outgoing) -> None:
        """Unreadable: set aside visibly (here, and at the hub, which cancels
        the dispatch), consumed with its seq so that later seqs move on."""
        self.commit.dead.append((p.error, p.raw))
        self.consume(p, DEAD_LETTER, [event])

    def refuse(self, p: Pending, at: float, *also: Outgoing) -> None:
        """Consumed visibly without the handler (the run has ended), so the
        hub settles the dispatch and later seqs move on."""
        outcome = DispatchOutcome.REFUSED_TERMINAL
        self.commit.steps = (self.commit.steps or 0) + 1
        self.consume(p, outcome, [self.processed(p, at, outcome, self.commit.steps), *also])

    def made(
        self, p: Pending, at: float, ctx: Context, after: Snapshot, cancel: str | None = None
    ) -> list[Outgoing]:
        """The events a handler call on ``p`` commits, in order, each encoded
        once; :class:`LimitExceeded` for one too large for a frame, before
        anything of the call joins the commit. ``cancel``: ``p`` is a cancel
        with that reason, and the run ends cancelled, whatever the call said."""
        run_id = self.commit.run_id
        before: list[Event] = []
        if self.status is None:
            before.append(RunStarted(event_id=new_id("evt"), run_id=run_id, at=at))
        before.extend(ctx.events)
        end: list[Event] = []
        if cancel is not None:
            end.append(RunCancelled(event_id=new_id("evt"), run_id=run_id, at=at, reason=cancel))
        elif ctx.completed:
            end.append(
                RunCompleted(event_id=new_id("evt"), run_id=run_id, at=at, result=ctx.result)
            )
        elif ctx.failed:
            end.append(RunFailed(event_id=new_id("evt"), run_id=run_id, at=at, error=ctx.error))
        step = (self.commit.steps or 0) + 1
        return [
            *(check_encoded(outgoing(e)) for e in before),
            self.processed(p, at, DispatchOutcome.PROCESSED, step, after, trace=ctx.trace),
            *(check_encoded(outgoing(e)) for e in end),
        ]

    def handled(
        self,
        p: Pending,
        ctx: Context,
        decision: str | None,
        after: Snapshot,
        version: int,
        made: list[Outgoing],
        cancel: str | None = None,
    ) -> Step:
        """A handler call on ``p`` joins the commit: its events, the run's new
        state, and the status it leaves the run in (a decision may open the
        run's gate; a call may close it, or end the run; a cancel's call
        ends it cancelled)."""
        commit = self.commit
        commit.steps = (commit.steps or 0) + 1
        self.state, self.ran = after, version
        commit.state, commit.version = after.data, version
        self.consume(p, DispatchOutcome.PROCESSED, made)
        waited = self.waiting
        status = self.status or RunStatus.RUNNING
        approvals = [a for a in commit.approvals or [] if a != decision] + ctx.approvals
        if cancel is not None:
            status, approvals = RunStatus.CANCELLED, []
        elif ctx.completed:
            status, approvals = RunStatus.COMPLETED, []
            commit.result = to_json(ctx.result, "the run result")
        elif ctx.failed:
            status, approvals, commit.error = RunStatus.FAILED, [], ctx.error
        elif approvals:
            status = RunStatus.WAITING
        elif waited:
            status = RunStatus.RUNNING
        self.status, commit.approvals = status, approvals
        return Step.GATE_OPENED if waited and status != RunStatus.WAITING else Step.PROCESSED

    def resume(self, p: Pending, at: float) -> Step:
        """A ``resume``: consumed as processed, the run's state unchanged; if
        the run is suspended, it runs again and the rows it holds start
        their attempts anew at the resume's version at least. Otherwise a
        no-op."""
        resumed = self.suspended
        if resumed:
            assert p.envelope is not None
            self.status = RunStatus.RUNNING
            self.commit.resumed = max(p.envelope.version, 1)
        outcome = DispatchOutcome.PROCESSED
        self.consume(p, outcome, [self.processed(p, at, outcome, self._step())])
        return Step.RESUMED if resumed else Step.PROCESSED

    def terminate(self, p: Pending, at: float, reason: str, error: str = "") -> None:
        """A ``cancel`` that ends the run without a handler call: one that
        terminates, or one the handler failed on past its budget (``error``,
        kept on the item): consumed as processed, the run ``cancelled``; the
        items it holds and later ones are refused, its live children cancelled."""
        started = self._started(at)
        outcome = DispatchOutcome.PROCESSED
        done = self.processed(p, at, outcome, self._step(), error=error)
        run_id = self.commit.run_id
        cancelled = RunCancelled(event_id=new_id("evt"), run_id=run_id, at=at, reason=reason)
        self.consume(p, outcome, [*started, done, check_encoded(outgoing(cancelled))])
        self.status, self.commit.approvals = RunStatus.CANCELLED, []
        if error:
            self.commit.error = error

    def park(self, p: Pending, at: float, error: str) -> None:
        """Past the budget under ``park``: the item is consumed as ``parked``
        with its error, the run goes on."""
        started = self._started(at)
        outcome = DispatchOutcome.PARKED
        done = self.processed(p, at, outcome, self._step(), error=error)
        self.consume(p, outcome, [*started, done])

    def suspend(self, p: Pending, at: float, attempts: int, error: str) -> None:
        """Past the budget under ``suspend``: the run is suspended, the item
        held with every later one of the run, until a ``resume``."""
        started = self._started(at)
        self.status = RunStatus.SUSPENDED
        self.hold(p)
        suspended = RunSuspended(
            event_id=new_id("evt"),
            run_id=self.commit.run_id,
            at=at,
            dispatch_id=p.dispatch_id,
            attempts=attempts,
            error=error,
        )
        self.commit.events.extend([*started, check_encoded(outgoing(suspended))])

    def fail(self, p: Pending, at: float, error: str) -> None:
        """Past the budget under ``fail`` (or a policy this sidecar does not
        know): the item is consumed as ``failed``, the run fails; later
        items are refused."""
        started = self._started(at)
        outcome = DispatchOutcome.FAILED
        done = self.processed(p, at, outcome, self._step(), error=error)
        failed = RunFailed(event_id=new_id("evt"), run_id=self.commit.run_id, at=at, error=error)
        self.consume(p, outcome, [*started, done, check_encoded(outgoing(failed))])
        self.status, self.commit.approvals, self.commit.error = RunStatus.FAILED, [], error

    def hold(self, p: Pending) -> None:
        if not p.held:  # a held row stays held
            self.commit.held.append((p.dispatch_id, p.seq))

    def processed(
        self,
        p: Pending,
        at: float,
        outcome: DispatchOutcome,
        step: int,
        state: Snapshot | None = None,
        error: str = "",
        trace: dict[str, str] | None = None,
    ) -> Outgoing:
        """The DispatchProcessed of ``p``, with the run's state (``state``, else
        the batch's), as it is encoded already; ``error``: why it was not
        processed."""
        envelope = p.envelope
        return check_encoded(
            processed(
                event_id=new_id("evt"),
                run_id=self.commit.run_id,
                at=at,
                dispatch_id=p.dispatch_id,
                seq=p.seq,
                state=(state or self.state).data,
                outcome=outcome,
                step=step,
                version=max(envelope.version, 1) if envelope is not None else 0,
                error=error,
                trace=trace,
            )
        )
