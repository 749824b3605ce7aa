"""The run actor: calls the handler for a batch of one run's envelopes and
commits the outcome in one inbox transaction (transactional outbox).

An approval gate: once a handler call asked for approvals (and did not end
the run), the run is ``waiting``. The decision of one of them is processed
when it comes; anything else is held (an inbox row in state ``held``; the
processing position moves on, so other runs do not wait). The decision of
the last one makes the run ``running`` again and ends the batch, so that the
held rows come next, in their order, before anything later
(:meth:`Inbox.next_batch`).

A suspended run holds its items the same way, until a ``resume`` item
comes: it overtakes what the run holds, as a decision does, and ends the
batch so that the held rows come next, the one the handler failed on first.

A ``cancel`` item (``POST /runs/{id}/cancel``) overtakes what a waiting or
suspended run holds the same way. Its handler call ends the run
``cancelled`` whatever the call did; one that terminates ends it without a
call. Either way the rows the run held come next, and are refused.

:meth:`RunActor.receive` takes a batch's items in order, each by one of
the ways :class:`~sidecar.execution._batch.Step` names, and commits what
they made in one transaction. A handler call that fails (raises, overruns
its timeout) ends the batch: what came before it is committed with one more
failed attempt of its item, whose error is kept; past the deployment's
``max_attempts`` (or at once, for an error a retry cannot fix) the same
commit applies its ``on_failure``. The actor itself never crashes on a
handler's failure: the scheduler retries the item, after its backoff."""

from __future__ import annotations

import time
from contextlib import closing
from typing import Protocol

import anyio

from runtime import (
    RESUME_KIND,
    EnvelopeQuarantined,
    RunCancelled,
    RunStatus,
    afailpoint,
    is_terminal,
    new_id,
    tracing,
)
from runtime.actors import Actor
from runtime.wire import CANCEL_KIND, FailurePolicy

from .._errors import HandlerTimeout, RunStateUnreadable
from ..storage import Commit, Envelope, Inbox, Pending, outgoing
from ._batch import Batch, Step
from ._config import RunsConfig
from ._context import Context, Minter
from ._failures import attempt_failed, give_up
from ._state import Snapshot, snapshot_of, state_snapshot
from ._steps import StepRecorder
from ._watch import HandlerWatch
from .code import Handler, StateMigration
from .handler_io import ApprovalDecision, Item, cancel_order, item_of


class RunOwner(Protocol):
    """What a run actor uses of the runs that own it (``Runs``)."""

    @property
    def inbox(self) -> Inbox: ...

    @property
    def deployment_id(self) -> str: ...

    async def handler_for(self, entrypoint: str | None, version: int = 1) -> Handler:
        """The handler of an item of ``version``: a child run's by its
        entrypoint; None: the deployment's."""
        ...

    async def migration_for(self, entrypoint: str | None, version: int) -> StateMigration | None:
        """``migrate_state`` of the module an item of ``version`` runs in."""
        ...

    @property
    def minter(self) -> Minter | None: ...

    @property
    def handler_timeout(self) -> float:
        """Seconds a handler call may run before it fails (and is retried)."""
        ...

    @property
    def policy(self) -> FailurePolicy:
        """The deployment's failure policy, as the hub last said it."""
        ...

    @property
    def step_budget(self) -> float:
        """Seconds of handling after which a batch stops and commits."""
        ...

    @property
    def recorder(self) -> StepRecorder:
        """Where a handler's steps are made durable (and shipped) before they return."""
        ...

    @property
    def config(self) -> RunsConfig:
        """The runs' settings: the clock and step faults a handler's ``ctx`` gets among them."""
        ...


class RunActor(Actor[list[Pending]]):
    """One instance per (re)start; its state is always the last committed one."""

    def __init__(self, runs: RunOwner, run_id: str) -> None:
        self._runs = runs
        self._run_id = run_id
        self._status: str | None = None
        self._state = Snapshot(b"\x80", {})  # msgpack's empty map
        self._steps = 0
        self._approvals: list[str] = []
        self._entrypoint: str | None = None
        self._version = 0
        """The workflow version that processed the run's latest item (0: none)."""
        self._unreadable: str | None = None
        """Why the run's stored state cannot be read (None: it can)."""

    async def started(self) -> None:
        record = await self._runs.inbox.load_run(self._run_id)
        if record.state_error is not None:
            # Never processed on a stand-in state: each item the handler
            # would get fails at once (the policy applies); the bytes stay.
            self._unreadable = f"run {self._run_id}: {record.state_error}"
        self._status = record.status
        self._state = snapshot_of(record.state, f"stored state of {self._run_id}")
        self._steps, self._approvals = record.steps, record.approvals
        self._entrypoint = record.entrypoint
        # A run that processed items before versions were recorded ran version 1.
        self._version = record.version or (1 if record.status is not None else 0)

    async def receive(self, message: list[Pending]) -> None:
        commit = Commit(run_id=self._run_id, status=self._status or RunStatus.RUNNING, consumed=[])
        commit.steps, commit.approvals = self._steps, list(self._approvals)
        batch = Batch(commit, self._status, self._state, self._version)
        current: Pending | None = None  # the item being taken
        error: Exception | None = None
        with (
            anyio.CancelScope() as scope,
            closing(HandlerWatch(scope, self._runs.handler_timeout)) as watch,
        ):
            for p in message:
                if batch.over_budget(self._runs.step_budget):
                    break  # the rest comes next step, after this one's commit
                current = p
                try:
                    step = await self._take(p, batch, watch)
                except Exception as exc:
                    error = exc
                    break
                current = None
                if step in (Step.GATE_OPENED, Step.RESUMED):
                    break  # the rows the gate held come next, before the rest
        if current is not None:
            if error is None and watch.overran is not None:
                error = self._timed_out(watch.overran)
            if error is not None:
                # What the batch achieved before the failing item commits
                # with the failed attempt; the retry starts at that item.
                attempt_failed(self._runs.policy, current, error, batch)
        await self._commit(batch)

    async def _take(self, p: Pending, batch: Batch, watch: HandlerWatch) -> Step:
        """Take one item of the batch, the one way that fits it."""
        envelope = p.envelope
        if envelope is None:
            return self._quarantine(p, batch)
        if batch.ended:
            return self._refuse(p, batch)
        if (
            batch.status is None
            and envelope.kind == "start"
            and await self._orphan(envelope, batch)
        ):
            return self._cancel(p, batch)
        if envelope.kind == RESUME_KIND:
            return batch.resume(p, time.time())
        cancel = cancel_order(envelope) if envelope.kind == CANCEL_KIND else None
        if cancel is not None and cancel[1]:
            batch.terminate(p, time.time(), cancel[0])
            return Step.TERMINATED
        item = item_of(envelope)
        decision = item.approval_id if isinstance(item, ApprovalDecision) else None
        if cancel is None and (
            batch.suspended or (batch.waiting and decision not in (batch.commit.approvals or []))
        ):
            batch.hold(p)
            return Step.HELD
        if p.attempts >= self._runs.policy.max_attempts:
            # Its budget was spent before this call (by a process that died
            # on it, or under a larger max_attempts): no call, the policy.
            give_up(self._runs.policy, p, batch, p.failure or "retry budget spent", p.attempts)
            return Step.GIVEN_UP
        if self._unreadable is not None:
            raise RunStateUnreadable(self._unreadable)
        reason = cancel[0] if cancel is not None else None
        return await self._process(p, item, decision, batch, watch, reason)

    def _quarantine(self, p: Pending, batch: Batch) -> Step:
        event = EnvelopeQuarantined(
            event_id=new_id("evt"),
            run_id=self._run_id,
            at=time.time(),
            dispatch_id=p.dispatch_id,
            reason=p.error,
        )
        batch.quarantine(p, outgoing(event))
        return Step.QUARANTINED

    def _refuse(self, p: Pending, batch: Batch) -> Step:
        batch.refuse(p, time.time())
        return Step.REFUSED

    async def _orphan(self, start: Envelope, batch: Batch) -> bool:
        """A child run's first item: its parent and entrypoint are recorded;
        whether that parent has ended (the child never runs then)."""
        batch.commit.parent_run_id = start.sender
        batch.commit.entrypoint = self._entrypoint = start.subject or None
        if start.sender is None:
            return False
        parent = await self._runs.inbox.load_run(start.sender)
        return parent.status is not None and is_terminal(parent.status)

    def _cancel(self, p: Pending, batch: Batch) -> Step:
        now = time.time()
        cancelled = RunCancelled(
            event_id=new_id("evt"), run_id=self._run_id, at=now, reason="parent run ended"
        )
        batch.status = RunStatus.CANCELLED
        batch.refuse(p, now, outgoing(cancelled))
        return Step.CANCELLED

    async def _process(
        self,
        p: Pending,
        item: Item,
        decision: str | None,
        batch: Batch,
        watch: HandlerWatch,
        cancel: str | None,
    ) -> Step:
        """The handler's call on one item, and what it made: the run's new
        state and status, the events. Nothing joins the commit unless all of
        it is within its limits: a too-large value fails this item alone,
        and the batch's earlier items commit. ``cancel``: the item is a
        cancel with that reason, which ends the run cancelled."""
        assert p.envelope is not None
        now, version = time.time(), max(p.envelope.version, 1)
        ctx = await self._call(p, item, batch.state, version, batch.ran, watch)
        after = state_snapshot(ctx.state)
        made = batch.made(p, now, ctx, after, cancel)
        return batch.handled(p, ctx, decision, after, version, made, cancel)

    async def _call(
        self, p: Pending, item: Item, state: Snapshot, version: int, ran: int, watch: HandlerWatch
    ) -> Context:
        """The handler call of ``version`` on one item, timed by ``watch``;
        first, when the run's previous item was processed by another
        version, its ``migrate_state``."""
        runs = self._runs
        handler = await runs.handler_for(self._entrypoint, version)
        migrate = await runs.migration_for(self._entrypoint, version) if ran != version else None
        config = runs.config
        # What this dispatch's steps returned when it was processed before.
        recorded = await runs.inbox.steps_of(p.dispatch_id)
        ctx = Context(
            run_id=self._run_id,
            deployment_id=runs.deployment_id,
            dispatch_id=p.dispatch_id,
            state=state.take(),
            minter=runs.minter,
            steps=recorded,
            recorder=runs.recorder,
            step_faults=config.step_faults,
            now=config.now,
            sleep=config.sleep,
            mail_domain=config.mail_domain,
        )
        await afailpoint("sidecar.handler.before")
        watch.begin(p.dispatch_id)
        try:
            with (
                tracing.spans.handling(runs.deployment_id, self._run_id, p.dispatch_id)
                if tracing.on
                else tracing.OFF
            ) as trace:
                ctx.trace = trace or ctx.trace
                if migrate is not None and ran:
                    ctx.state = await migrate(ctx.state, ran)
                    state_snapshot(ctx.state)  # a dict, JSON-able, within its limit
                await handler(ctx, item)
        except Exception as exc:
            # The supervisor logs it with its traceback: say which item it was.
            exc.add_note(f"handling dispatch {p.dispatch_id} (seq {p.seq}) of run {self._run_id}")
            raise
        finally:
            watch.end()
        # A handler that swallowed its cancellation still timed out.
        if watch.overran is not None:
            raise self._timed_out(watch.overran)
        # The handler's effects exist only in memory until the commit.
        await afailpoint("sidecar.handler.after")
        return ctx

    def _timed_out(self, dispatch_id: str) -> HandlerTimeout:
        timeout = self._runs.handler_timeout
        return HandlerTimeout(f"handler did not return within {timeout}s (dispatch {dispatch_id})")

    async def _commit(self, batch: Batch) -> None:
        commit = batch.commit
        if not commit.changes_run and commit.attempt is None:
            return
        commit.status = batch.status or RunStatus.RUNNING
        await afailpoint("sidecar.run.before_commit")
        await self._runs.inbox.commit(commit)
        # Committed to the outbox; the shipper has not been woken yet.
        await afailpoint("sidecar.run.after_commit")
        if not commit.changes_run:
            return  # a failed attempt alone: the run is as it was
        self._status, self._state = commit.status, batch.state
        self._steps, self._approvals = commit.steps or 0, list(commit.approvals or [])
        self._version = commit.version or self._version
