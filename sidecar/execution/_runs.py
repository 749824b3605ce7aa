"""Runs: one supervised actor per run, driven in the deployment's seq order.

Every dispatch of the deployment comes to this sidecar and seq is per
deployment, so one scheduler takes the next in-order batch from the inbox
(always of one run), asks that run's actor to process it, and only then
looks for the next. Processing order is therefore seq order across runs.
The run actor is where supervision applies: a handler that raises crashes
the actor, the kernel restarts it with backoff and the scheduler's next ask
retries the same envelope; past the restart budget the actor gives up and
the scheduler commits RunFailed, consuming the failing envelope as
``failed`` so that later dispatches are not wedged behind it. A value over
its size limit (:class:`LimitExceeded`) fails the run at once: a retry
would make it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import anyio

from runtime import (
    DispatchOutcome,
    DispatchProcessed,
    Event,
    Flag,
    RunFailed,
    RunSnapshot,
    RunStarted,
    RunStatus,
    Wakeup,
    is_terminal,
    new_id,
)
from runtime.actors import ActorRef, RestartPolicy, Supervisor
from runtime.errors import ActorStopped
from runtime.loops import StackedContext
from runtime.wire import clip_text

from .._errors import EntrypointError, LimitExceeded, WorkflowLoadError
from ..storage import Commit, Inbox, Pending, outgoing
from ._context import Minter
from ._run_actor import RunActor
from ._versions import Versions
from ._workflow import Handler, StateMigration

log = logging.getLogger("mailrun.sidecar.runs")


@dataclass(frozen=True)
class RunsConfig:
    batch_limit: int = 256
    """Consecutive envelopes of one run handled per step (one commit)."""
    step_budget: float = 0.1
    """Seconds of handling after which a step takes no further envelope and
    commits: a backlog of quick items goes ``batch_limit`` to an fsync, slow
    ones still commit (and their events ship) about this often."""
    policy: RestartPolicy = field(default_factory=lambda: RestartPolicy(max_restarts=5, window=60))
    handler_timeout: float = 300.0
    """A handler call running longer than this fails (and is retried)."""
    stop_grace: float = 5.0
    """On shutdown, how long a handler may take to finish its current batch."""


class Runs(StackedContext):
    """Async context manager owning the run actors and the scheduler task."""

    def __init__(
        self,
        *,
        inbox: Inbox,
        deployment_id: str,
        handler: Handler,
        resolve: Callable[[str], Handler] | None = None,
        minter: Minter | None = None,
        on_commit: Callable[[], None] = lambda: None,
        config: RunsConfig | None = None,
        versions: Versions | None = None,
    ) -> None:
        self.inbox = inbox
        self.deployment_id = deployment_id
        self.handler = handler
        self._resolve = resolve
        self._handlers: dict[str, Handler] = {}
        self.versions = versions
        self.minter = minter
        self.on_commit = on_commit
        self.config = config or RunsConfig()
        self._supervisor = Supervisor(
            on_give_up=self._gave_up_cb, stop_grace=self.config.stop_grace
        )
        self._gave_up: dict[str, BaseException] = {}
        self._wake = Wakeup()
        self._stepping = anyio.Lock()  # held for one step; adopt() waits for it
        self.idle = Flag()
        """Set while the scheduler has nothing it can process."""

    async def _open(self, stack: AsyncExitStack) -> None:
        await stack.enter_async_context(self._supervisor)
        tg = await stack.enter_async_context(anyio.create_task_group())
        # Leaving: the scheduler stops first; then the supervisor stops the
        # actors, in order (each finishes and commits its current batch,
        # within the stop grace) unless we leave on an error or cancellation.
        stack.callback(tg.cancel_scope.cancel)
        tg.start_soon(self._schedule)
        self.kick()

    @property
    def handler_timeout(self) -> float:
        return self.config.handler_timeout

    @property
    def step_budget(self) -> float:
        return self.config.step_budget

    async def handler_for(self, entrypoint: str | None, version: int = 1) -> Handler:
        """The handler of an item of ``version`` of the code: a child run's
        entrypoint, else the deployment's.

        Raises :class:`EntrypointError` (or WorkflowLoadError) when the
        sources do not have it: the child run fails at once."""
        if self.versions is not None:
            return await self.versions.handler(version, entrypoint)
        if entrypoint is None:
            return self.handler
        handler = self._handlers.get(entrypoint)
        if handler is None:
            if self._resolve is None:
                raise EntrypointError(f"child run entrypoint {entrypoint!r} cannot be loaded here")
            handler = self._handlers[entrypoint] = self._resolve(entrypoint)
        return handler

    async def migration_for(self, entrypoint: str | None, version: int) -> StateMigration | None:
        """The ``migrate_state`` hook an item of ``version`` runs first when
        the run's previous item was processed by another version."""
        if self.versions is None:
            return None
        return await self.versions.migration(version, entrypoint)

    def kick(self) -> None:
        """Something may be ready to process (new envelopes, a raised floor)."""
        self._wake.set()

    async def adopt(self, runs: list[RunSnapshot], floor: int, settled: Sequence[int] = ()) -> None:
        """Take the hub's state of every run (see :meth:`Inbox.adopt`) between
        two steps, and restart the run actors, which hold their run's state."""
        async with self._stepping:
            await self.inbox.adopt(runs, floor, settled)
            self._gave_up.clear()
            await self._supervisor.stop_all()
        log.info("adopted the hub's state of %d run(s), up to seq %d", len(runs), floor)
        self.kick()

    async def _schedule(self) -> None:
        while True:
            await self._wake.wait()
            self.idle.clear()
            while True:
                async with self._stepping:
                    if not await self._step():
                        break
            self.idle.set()

    async def _step(self) -> bool:
        # A run that ended cancelled its live children in its commit: their
        # actors hold a status from before that.
        for cancelled in self.inbox.take_cancelled():
            child = self._supervisor.get(cancelled)
            if child is not None:
                await child.stop()
        batch = await self.inbox.next_batch(self.config.batch_limit)
        if not batch:
            return False
        run_id = batch[0].run_id
        error = self._gave_up.pop(run_id, None)
        if error is not None:
            await self._fail_run(batch[0], error)
            self.on_commit()
            return True
        ref = await self._actor(run_id)
        try:
            await ref.ask(batch, timeout=self._ask_timeout())
        except ActorStopped:
            await ref.stop()  # returns once the supervisor's give-up handling ran
            if run_id not in self._gave_up:
                log.warning("run %s stopped while processing; scheduling stops", run_id)
                return False
        except (LimitExceeded, EntrypointError, WorkflowLoadError) as exc:
            # Retrying cannot help: the same call makes the same too-large
            # value again, a child's entrypoint stays missing. The run fails
            # now, on this envelope (next step).
            await ref.stop()
            self._gave_up[run_id] = exc
        except Exception as exc:
            # The kernel restarts the actor after a backoff and the next ask
            # (queued meanwhile) retries from the first unconsumed envelope;
            # or, past the budget, it gave up (seen by the next step).
            log.debug("run %s: handler failed, will retry: %r", run_id, exc)
        self.on_commit()
        return True

    async def _actor(self, run_id: str) -> ActorRef[list[Pending]]:
        ref = self._supervisor.get(run_id)
        if ref is not None and ref.alive:
            return ref
        return await self._supervisor.spawn(
            lambda: RunActor(self, run_id),
            name=run_id,
            mailbox_size=4,
            policy=self.config.policy,
        )

    def _ask_timeout(self) -> float:
        return self.config.handler_timeout * self.config.batch_limit + 60.0

    async def _gave_up_cb(self, name: str, exc: BaseException) -> None:
        self._gave_up[name] = exc

    async def _fail_run(self, p: Pending, error: BaseException) -> None:
        """The retry budget is spent: the run fails, and the envelope it was
        stuck on (``p``, still the next one) is consumed as ``failed``:
        recorded, not dropped, and later seqs are not held behind it."""
        run_id = p.run_id
        text = clip_text(f"{type(error).__name__}: {error}")
        record = await self.inbox.load_run(run_id)
        now = time.time()
        events: list[Event] = []
        if record.status is None:
            events.append(RunStarted(event_id=new_id("evt"), run_id=run_id, at=now))
        events.append(
            DispatchProcessed(
                event_id=new_id("evt"),
                run_id=run_id,
                at=now,
                dispatch_id=p.dispatch_id,
                seq=p.seq,
                state=record.state,
                outcome=DispatchOutcome.FAILED,
                step=record.steps + 1,
                version=max(p.envelope.version, 1) if p.envelope is not None else 0,
            )
        )
        ended = record.status is not None and is_terminal(record.status)
        if not ended:
            events.append(RunFailed(event_id=new_id("evt"), run_id=run_id, at=now, error=text))
        await self.inbox.commit(
            Commit(
                run_id=run_id,
                status=record.status if ended and record.status else RunStatus.FAILED,
                # A held row is behind the processing position: no seq for it.
                consumed=[(p.dispatch_id, None if p.held else p.seq, DispatchOutcome.FAILED)],
                error=None if ended else text,
                events=[outgoing(e) for e in events],
                steps=record.steps + 1,
                approvals=[],
            )
        )
        log.error("run %s failed: %s", run_id, text)
