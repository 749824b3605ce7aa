"""Runs: one actor per run, the runs of the deployment processed
concurrently, each in its seq order, with the deployment's failure policy.

Every dispatch of the deployment comes to this sidecar and seq is per
deployment. One scheduler looks for the next batch of a run that is not
busy (:meth:`Inbox.next_batch`: within the known prefix of seqs, so a frame
still to come can never be an earlier item of the run it picks), names its
items in flight, hands it to that run's actor, and looks again; the actor's
answer settles the batch in a callback (no task of its own waits for it:
a lone mail's cycle paid a task's start and two of its turns). At most the
policy's ``max_concurrent_runs`` batches are in flight, one per run, so a
run's items are taken strictly in its order while the others go on. A run
whose handler hangs holds back only itself (until its handler timeout).
Two kinds of batch run alone in the process: release 1's rows (no seq),
which come before everything, and a row a dead process was handling among
several (a suspect), so that its next death is charged to it.

A handler call that fails is one failed attempt of its item, counted in
the inbox (the run actor commits it, with what its batch did before). The
scheduler retries the item, alone in its batch, after a backoff of its run
(``_pacing``); past ``max_attempts`` the actor applies the policy's
``on_failure`` in its commit (``suspend``, ``park`` or ``fail``). A process
that dies during a handler call is charged the same way
(``sidecar/storage/_attempts.py``): before each batch its dispatches are
named in the inbox without waiting for the disk, and at the next start
those marks say which item it died on.

A handler's ``ctx.step`` is made durable here (:meth:`Runs.record`): its
record and event in the inbox in one transaction, the shipper woken at once.

The policy comes from the hub (every Welcome, and ``SetPolicy``) and is kept
in the inbox's ``meta``, so a sidecar that starts without its hub uses the
last one it had (:data:`~runtime.wire.LEGACY_POLICY` before any).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack

import anyio
import msgspec

from runtime import Flag, RunSnapshot, Wakeup, afailpoint
from runtime.actors import ActorRef, Supervisor
from runtime.errors import ActorStopped, MailboxFull
from runtime.loops import Broadcast, StackedContext
from runtime.wire import LEGACY_POLICY, FailurePolicy, StepRecorded

from .._errors import EntrypointError
from ..storage import Inbox, Pending
from ._config import RunsConfig
from ._context import Minter
from ._pacing import Pacing
from ._run_actor import RunActor
from .code import Handler, StateMigration, Versions

log = logging.getLogger("mailrun.sidecar.runs")


POLICY_KEY = "policy"
"""The ``meta`` key of the failure policy the hub last gave (JSON)."""


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
        self._supervisor = Supervisor(stop_grace=self.config.stop_grace)
        self._policy = LEGACY_POLICY
        self._suspects: set[str] = set()
        """Rows of a batch during which an earlier process died: each is
        processed alone, so that another death is charged to its own row."""
        self._pacing = Pacing()
        self._busy: set[str] = set()
        """The runs whose batch is in flight (one each)."""
        self._alone = False
        """A batch that runs alone in the process is in flight."""
        self._released: set[str] = set()
        """Runs that left ``_busy`` or a backoff since the last search (one
        that left nothing pending anywhere in the known prefix need not be:
        a row of it still to come lies past every mark)."""
        self._scan_from = 0
        """Every pending row at or below this seq is of a run in ``_busy`` or
        a backoff, or in ``_released`` (0: not known): the search starts here."""
        self._stale: set[str] = set()
        """Runs cancelled by a parent's end: their actors hold an older status."""
        self._stopped_actors: set[str] = set()
        """Runs whose actor stopped (past its restart budget): the next batch
        starts a fresh one once the old one has finished."""
        self._finished = Broadcast()  # a batch is done; adopt() waits for all
        self._draining = False
        """adopt() waits for the batches in flight: each end notifies it (a
        notify makes an event: none while nobody waits)."""
        self._wake = Wakeup()
        # Held while a batch is picked; adopt() holds it. Taken without a
        # turn of the loop when free: the scheduler's wait gave it one.
        self._picking = anyio.Lock(fast_acquire=True)
        self.idle = Flag()
        """Set while the scheduler has nothing in flight and nothing it can process."""

    async def _open(self, stack: AsyncExitStack) -> None:
        stored = await self.inbox.get_meta(POLICY_KEY)
        if stored is not None:
            self._policy = _policy.decode(stored)
        self._suspects = set(await self.inbox.charge_crash())
        # Last on the way out: the actors have committed or been cancelled.
        stack.push_async_callback(self._stopped)
        await stack.enter_async_context(self._supervisor)
        tg = await stack.enter_async_context(anyio.create_task_group())
        # Leaving: the scheduler stops first; then the supervisor stops the
        # actors, in order (each finishes and commits its current batch,
        # within the stop grace) unless we leave on an error or cancellation.
        stack.callback(tg.cancel_scope.cancel)
        tg.start_soon(self._schedule)
        self.kick()

    async def _stopped(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.inbox.clear_in_flight()

    @property
    def policy(self) -> FailurePolicy:
        return self._policy

    async def set_policy(self, policy: FailurePolicy) -> None:
        """The hub's failure policy (a Welcome's, a SetPolicy's): in force from
        the next handler call, and kept for a start without the hub."""
        if policy != self._policy or await self.inbox.get_meta(POLICY_KEY) is None:
            await self.inbox.set_meta(POLICY_KEY, msgspec.json.encode(policy).decode())
            if policy != self._policy:
                log.info("failure policy: %s", policy)
            self._policy = policy

    @property
    def handler_timeout(self) -> float:
        return self._policy.handler_timeout

    @property
    def recorder(self) -> Runs:
        return self

    async def record(self, step: StepRecorded) -> None:
        """A step's outcome, durable before the step returns; its event goes
        to the hub at once, not with the item's commit."""
        await self.inbox.record_step(step)
        self.on_commit()
        await afailpoint("sidecar.step.recorded")

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
        """Take the hub's state of every run (see :meth:`Inbox.adopt`) once
        the batches in flight are done, none starting meanwhile, and restart
        the run actors, which hold their run's state."""
        async with self._picking:
            self._draining = True
            try:
                while self._busy:
                    await self._finished.wait()
            finally:
                self._draining = False
            await self.inbox.adopt(runs, floor, settled)
            await self._supervisor.stop_all()
            self._pacing.clear()
            self._stale.clear()
            self._scan_from = 0
        log.info("adopted the hub's state of %d run(s), up to seq %d", len(runs), floor)
        self.kick()

    async def _schedule(self) -> None:
        while True:
            await self._wake.wait(self._pacing.next_due())
            self.idle.clear()
            async with self._picking:
                while await self._dispatch() and not self._searched_all():
                    pass
            if not self._busy and self._pacing.next_due() is None:
                # Looked after the last batch ended: nothing can be processed.
                self.idle.set()

    def _searched_all(self) -> bool:
        """Whether the search that started a batch left nothing for another
        to find: no run released or due, and nothing past its mark (a lone
        mail's batch takes every row of the known prefix)."""
        return (
            not self._released
            and self._pacing.next_due() is None
            and self.inbox.nothing_past(self._scan_from)
        )

    async def _dispatch(self) -> bool:
        """Start one batch; False when none can start now (the limit is
        reached, a batch runs alone, or nothing is ready)."""
        limit = max(1, self._policy.max_concurrent_runs)
        if self._alone or len(self._busy) >= limit:
            return False
        # A run that ended cancelled its live children in its commit: their
        # actors hold a status from before that.
        self._stale.update(self.inbox.take_cancelled())
        while True:
            self._released.update(self._pacing.due())
            batch = await self._next([*self._busy, *self._pacing.waiting()])
            if not batch:
                return False
            first = batch[0]
            alone = first.seq is None or first.dispatch_id in self._suspects
            if first.attempts or alone:
                batch = batch[:1]  # its next death, or failure, is its own
            else:
                batch = _before_suspects(batch, self._suspects)
            if not self._pacing.hold_for_retry(self._policy, first):
                break
        if alone and self._busy:
            self._released.add(first.run_id)  # looked at again, first
            return False  # once the batches in flight are done
        run_id = first.run_id
        if run_id in self._stale:
            self._stale.discard(run_id)
            stale = self._supervisor.get(run_id)
            if stale is not None:
                await stale.stop()  # idle: not busy, so its mailbox is empty
        ref = await self._actor(run_id)
        self._busy.add(run_id)
        self._alone = alone
        await self._send(ref, run_id, batch)
        return True

    async def _next(self, busy: list[str]) -> list[Pending]:
        """The next batch of a run not ``busy``, the one whose next row has the
        lowest seq (held rows first), as :meth:`Inbox.pick` finds it; without
        walking again the rows that the last search found all busy."""
        limit = self.config.batch_limit
        released = self._released.difference(busy)
        self._released.clear()
        best: list[Pending] = []
        # Batches end while this awaits the inbox, each adding its run to
        # ``_released``: the runs left over are added back, never assigned over
        # those (a run dropped from it is not looked at again until a search
        # from the mark, which starts past its rows: it would wait for ever).
        for run_id in sorted(released):
            batch = await self.inbox.run_batch(run_id, limit)
            if batch and batch[0].held:
                self._released |= released - {run_id}
                return batch
            if batch and (not best or _first_seq(batch) < _first_seq(best)):
                best = batch
        if best and _first_seq(best) <= self._scan_from:
            # Before any row the last search did not find busy: no run comes first.
            self._released |= released - {best[0].run_id}
            return best
        # The released runs have no row at or below the mark: a search from it finds all.
        batch, self._scan_from = await self.inbox.pick(limit, busy, self._scan_from)
        return batch or best  # best: past the rows a search walks

    async def _send(self, ref: ActorRef[list[Pending]], run_id: str, batch: list[Pending]) -> None:
        """Name the batch's items in flight, then hand it to the run's actor;
        its answer settles it (:meth:`_settle`)."""
        try:
            await self.inbox.mark_in_flight([p.dispatch_id for p in batch], run_id)
            # The run is not busy, so its mailbox is empty, unless batches
            # whose asks timed out are still queued there.
            answer = ref.ask_nowait(batch, timeout=self._ask_timeout())
        except (ActorStopped, MailboxFull) as exc:
            done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            done.set_exception(exc)
            self._settle(run_id, batch, done)
        except BaseException:
            self._finish(run_id, batch)
            raise
        else:
            answer.add_done_callback(lambda answer: self._settle(run_id, batch, answer))

    def _settle(self, run_id: str, batch: list[Pending], answer: asyncio.Future[object]) -> None:
        """The actor's answer to a batch: count its run's success or break,
        wake the shipper, and look for the next batch."""
        exc = None if answer.cancelled() else answer.exception()
        if isinstance(exc, ActorStopped):
            # Past its restart budget: the next batch starts a fresh one.
            self._stopped_actors.add(run_id)
            log.warning("run %s: its actor stopped; starting another", run_id)
            self._pacing.broke(run_id)
        elif exc is not None or answer.cancelled():
            # Not a handler's failure (those are attempts): the inbox, say,
            # or no room for the batch. The kernel restarts a crashed actor;
            # the next batch tries again.
            log.warning("run %s: processing broke: %r", run_id, exc)
            self._pacing.broke(run_id)
        else:
            self._pacing.succeeded(run_id)
        self.on_commit()
        self._finish(run_id, batch)

    def _finish(self, run_id: str, batch: list[Pending]) -> None:
        """The batch is no longer in flight: its run may take the next."""
        self._suspects.difference_update(p.dispatch_id for p in batch)
        self._busy.discard(run_id)
        self._alone = False
        if self._draining:
            self._finished.notify()
        if self._pacing.next_due() is not None or not self.inbox.nothing_to_pick():
            self._released.add(run_id)
            self.kick()
        elif not self._busy:
            # What the scheduler would find if woken: nothing (no batch is
            # in flight either: its rows would hold the position back).
            self.idle.set()

    async def _actor(self, run_id: str) -> ActorRef[list[Pending]]:
        ref = self._supervisor.get(run_id)
        if ref is not None and run_id in self._stopped_actors:
            await ref.stop()  # it is stopping: done once its task has ended
            ref = None
        self._stopped_actors.discard(run_id)
        if ref is not None and ref.alive:
            return ref
        return await self._supervisor.spawn(
            lambda: RunActor(self, run_id),
            name=run_id,
            mailbox_size=4,
            policy=self.config.policy,
        )

    def _ask_timeout(self) -> float:
        return self.handler_timeout * self.config.batch_limit + 60.0


def _first_seq(batch: list[Pending]) -> int:
    return batch[0].seq or 0


def _before_suspects(batch: list[Pending], suspects: set[str]) -> list[Pending]:
    """The batch up to its first suspect, which comes alone in a batch of its own."""
    for i, p in enumerate(batch):
        if p.dispatch_id in suspects:
            return batch[:i]
    return batch


_policy = msgspec.json.Decoder(FailurePolicy)
