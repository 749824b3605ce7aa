"""The run actor: calls the handler for a batch of one run's envelopes and
commits the outcome in one inbox transaction (transactional outbox).

An approval gate: once a handler call asked for approvals (and did not end
the run), the run is ``waiting``. The decision of one of them is processed
when it comes; anything else is held (an inbox row in state ``held``; the
processing position moves on, so other runs do not wait). The decision of
the last one makes the run ``running`` again and ends the batch, so that the
held rows come next, in their order, before anything later
(:meth:`Inbox.next_batch`)."""

from __future__ import annotations

import time
from contextlib import closing
from typing import Any, Protocol

import anyio
import msgspec

from runtime import (
    Actor,
    DispatchOutcome,
    DispatchProcessed,
    EnvelopeQuarantined,
    Event,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    RunStatus,
    afailpoint,
    is_terminal,
    new_id,
)

from .._errors import HandlerTimeout, RunStateUnreadable
from ..storage import Commit, Inbox, Pending
from ._context import Context, Minter, check_events, state_snapshot, to_json
from ._watch import HandlerWatch
from ._workflow import ApprovalDecision, Handler, Item, StateMigration, item_of


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
    def step_budget(self) -> float:
        """Seconds of handling after which a batch stops and commits."""
        ...


class RunActor(Actor[list[Pending]]):
    """One instance per (re)start; its state is always the last committed one."""

    def __init__(self, runs: RunOwner, run_id: str) -> None:
        self._runs = runs
        self._run_id = run_id
        self._status: str | None = None
        self._snapshot = b"{}"
        self._steps = 0
        self._approvals: list[str] = []
        self._entrypoint: str | None = None
        self._version = 0
        """The workflow version that processed the run's latest item (0: none)."""

    async def started(self) -> None:
        record = await self._runs.inbox.load_run(self._run_id)
        ended = record.status is not None and is_terminal(record.status)
        if record.state_error is not None and not ended:
            # Never processed on a stand-in state: the run fails with the
            # reason (after the usual retries); the stored bytes stay.
            raise RunStateUnreadable(f"run {self._run_id}: {record.state_error}")
        self._status = record.status
        self._snapshot = to_json(record.state, f"stored state of {self._run_id}")
        self._steps, self._approvals = record.steps, record.approvals
        self._entrypoint = record.entrypoint
        # A run that processed items before versions were recorded ran version 1.
        self._version = record.version or (1 if record.status is not None else 0)

    async def receive(self, message: list[Pending]) -> None:
        run_id = self._run_id
        status, snapshot = self._status, self._snapshot
        commit = Commit(run_id=run_id, status=status or RunStatus.RUNNING, consumed=[])
        commit.steps, commit.approvals = self._steps, list(self._approvals)
        ran = self._version
        began = time.monotonic()
        try:
            with (
                anyio.CancelScope() as scope,
                closing(HandlerWatch(scope, self._runs.handler_timeout)) as watch,
            ):
                for p in message:
                    if commit.consumed and time.monotonic() - began >= self._runs.step_budget:
                        break  # the rest comes next step, after this one's commit
                    now = time.time()
                    # A held row is behind the processing position: no seq for it.
                    seq = None if p.held else p.seq
                    if p.envelope is None:
                        # Unreadable: set it aside visibly (here, and at the hub,
                        # which cancels the dispatch), consumed with its seq so
                        # that later seqs move on.
                        commit.dead.append((p.error, p.raw))
                        commit.consumed.append((p.dispatch_id, seq, "dead_letter"))
                        commit.events.append(
                            EnvelopeQuarantined(
                                event_id=new_id("evt"),
                                run_id=run_id,
                                at=now,
                                dispatch_id=p.dispatch_id,
                                reason=p.error,
                            )
                        )
                        continue
                    if status is not None and is_terminal(status):
                        # The run has ended: consume it visibly so the hub settles
                        # the dispatch and later seqs move on.
                        outcome = DispatchOutcome.REFUSED_TERMINAL
                        commit.steps += 1
                        commit.consumed.append((p.dispatch_id, seq, outcome))
                        commit.events.append(
                            self._processed(p, now, snapshot, outcome, commit.steps)
                        )
                        continue
                    if status is None and p.envelope.kind == "start":
                        # A child run's first item: its parent and entrypoint.
                        commit.parent_run_id = p.envelope.sender
                        commit.entrypoint = self._entrypoint = p.envelope.subject or None
                        if await self._parent_ended(commit.parent_run_id):
                            status = RunStatus.CANCELLED
                            commit.steps += 1
                            commit.consumed.append(
                                (p.dispatch_id, seq, DispatchOutcome.REFUSED_TERMINAL)
                            )
                            commit.events += [
                                self._processed(
                                    p, now, snapshot, DispatchOutcome.REFUSED_TERMINAL, commit.steps
                                ),
                                RunCancelled(
                                    event_id=new_id("evt"),
                                    run_id=run_id,
                                    at=now,
                                    reason="parent run ended",
                                ),
                            ]
                            continue
                    item = item_of(p.envelope)
                    decision = item.approval_id if isinstance(item, ApprovalDecision) else None
                    if status == RunStatus.WAITING and decision not in commit.approvals:
                        if not p.held:
                            commit.held.append((p.dispatch_id, p.seq))
                        continue
                    version = max(p.envelope.version, 1)
                    ctx = await self._call(p, item, snapshot, version, ran, watch)
                    after = state_snapshot(ctx.state)
                    step = commit.steps + 1
                    made = self._made(p, now, ctx, after, started=status is None, step=step)
                    # Checked before anything joins the commit: a too-large event
                    # fails this item alone, the batch's earlier items commit.
                    check_events(made)
                    snapshot, commit.steps = after, step
                    ran = commit.version = version
                    commit.events.extend(made)
                    commit.consumed.append((p.dispatch_id, seq, DispatchOutcome.PROCESSED))
                    commit.state = msgspec.json.decode(snapshot)
                    waited = status == RunStatus.WAITING
                    status = status or RunStatus.RUNNING
                    approvals = [a for a in commit.approvals if a != decision] + ctx.approvals
                    if ctx.completed:
                        status, approvals = RunStatus.COMPLETED, []
                        commit.result = to_json(ctx.result, "the run result")
                    elif ctx.failed:
                        status, approvals, commit.error = RunStatus.FAILED, [], ctx.error
                    elif approvals:
                        status = RunStatus.WAITING
                    elif waited:
                        status = RunStatus.RUNNING
                    commit.approvals = approvals
                    if waited and status != RunStatus.WAITING:
                        break  # the rows the gate held come next, before the rest of this batch
            if watch.overran is not None:
                raise self._timed_out(watch.overran)
        except Exception:
            # Keep what the batch achieved before the failing envelope; the
            # exception then crashes this actor and the retry starts there.
            await self._commit(commit, status, snapshot)
            raise
        await self._commit(commit, status, snapshot)

    async def _parent_ended(self, parent_run_id: str | None) -> bool:
        if parent_run_id is None:
            return False
        parent = await self._runs.inbox.load_run(parent_run_id)
        return parent.status is not None and is_terminal(parent.status)

    async def _call(
        self, p: Pending, item: Item, snapshot: bytes, version: int, ran: int, watch: HandlerWatch
    ) -> Context:
        """The handler call of ``version`` on one item, timed by ``watch``;
        first, when the run's previous item was processed by another
        version, its ``migrate_state``."""
        assert p.envelope is not None
        runs = self._runs
        handler = await runs.handler_for(self._entrypoint, version)
        migrate = await runs.migration_for(self._entrypoint, version) if ran != version else None
        ctx = Context(
            run_id=self._run_id,
            deployment_id=runs.deployment_id,
            dispatch_id=p.dispatch_id,
            state=msgspec.json.decode(snapshot),
            minter=runs.minter,
        )
        await afailpoint("sidecar.handler.before")
        watch.begin(p.dispatch_id)
        try:
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

    def _made(
        self, p: Pending, now: float, ctx: Context, snapshot: bytes, *, started: bool, step: int
    ) -> list[Event]:
        """The events one handler call commits, in order."""
        run_id = self._run_id
        made: list[Event] = []
        if started:
            made.append(RunStarted(event_id=new_id("evt"), run_id=run_id, at=now))
        made.extend(ctx.events)
        made.append(self._processed(p, now, snapshot, DispatchOutcome.PROCESSED, step))
        if ctx.completed:
            made.append(
                RunCompleted(event_id=new_id("evt"), run_id=run_id, at=now, result=ctx.result)
            )
        elif ctx.failed:
            made.append(RunFailed(event_id=new_id("evt"), run_id=run_id, at=now, error=ctx.error))
        return made

    def _processed(
        self, p: Pending, now: float, snapshot: bytes, outcome: DispatchOutcome, step: int
    ) -> DispatchProcessed:
        state: dict[str, Any] = msgspec.json.decode(snapshot)
        version = max(p.envelope.version, 1) if p.envelope is not None else 0
        return DispatchProcessed(
            event_id=new_id("evt"),
            run_id=self._run_id,
            at=now,
            dispatch_id=p.dispatch_id,
            seq=p.seq,
            state=state,
            outcome=outcome,
            step=step,
            version=version,
        )

    async def _commit(self, commit: Commit, status: str | None, snapshot: bytes) -> None:
        if not commit.consumed and not commit.held:
            return
        commit.status = status or RunStatus.RUNNING
        await afailpoint("sidecar.run.before_commit")
        await self._runs.inbox.commit(commit)
        # Committed to the outbox; the shipper has not been woken yet.
        await afailpoint("sidecar.run.after_commit")
        self._status, self._snapshot = commit.status, snapshot
        self._steps, self._approvals = commit.steps or 0, list(commit.approvals or [])
        self._version = commit.version or self._version
