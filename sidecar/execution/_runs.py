"""Runs: one actor per run, driven in the deployment's seq order, with
the deployment's failure policy.

Every dispatch of the deployment comes to this sidecar and seq is per
deployment, so one scheduler takes the next in-order batch from the inbox
(always of one run), asks that run's actor to process it, and only then
looks for the next. Processing order is therefore seq order across runs.

A handler call that fails is one failed attempt of its item, counted in
the inbox (the run actor commits it, with what its batch did before). The
scheduler retries the item, alone in its batch, after a backoff doubling
from 0.1 s (with jitter, capped at the policy's ``max_backoff``); past
``max_attempts`` the actor applies the policy's ``on_failure`` in its
commit (``suspend``, ``park`` or ``fail``). A process that dies during a
handler call is charged the same way (``sidecar/storage/_attempts.py``):
before each batch its dispatches are named in the inbox without waiting for
the disk, and at the next start that mark says which item it died on.

The policy comes from the hub (every Welcome, and ``SetPolicy``) and is kept
in the inbox's ``meta``, so a sidecar that starts without its hub uses the
last one it had (:data:`~runtime.wire.LEGACY_POLICY` before any).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import anyio
import msgspec

from runtime import Backoff, Flag, Retry, RunSnapshot, Wakeup
from runtime.actors import ActorRef, RestartPolicy, Supervisor
from runtime.errors import ActorStopped
from runtime.loops import StackedContext
from runtime.wire import LEGACY_POLICY, FailurePolicy

from .._errors import EntrypointError
from ..storage import Inbox, Pending
from ._context import Minter
from ._run_actor import RunActor
from ._versions import Versions
from ._workflow import Handler, StateMigration

log = logging.getLogger("mailrun.sidecar.runs")


POLICY_KEY = "policy"
"""The ``meta`` key of the failure policy the hub last gave (JSON)."""

FIRST_RETRY = 0.1
"""Seconds before an item's first retry; each later one doubles it."""

_TROUBLE = Backoff(initial=0.05, maximum=1.0)
"""Between steps whose actor broke on something else than its handler."""


def retry_delay(policy: FailurePolicy, attempts: int) -> float:
    """Seconds before the retry of an item that failed ``attempts`` times:
    0.1 s doubling, with jitter, at most ``max_backoff``."""
    if policy.max_backoff <= 0:
        return 0.0
    return Backoff(min(FIRST_RETRY, policy.max_backoff), policy.max_backoff).delay(attempts)


@dataclass(frozen=True)
class RunsConfig:
    batch_limit: int = 256
    """Consecutive envelopes of one run handled per step (one commit)."""
    step_budget: float = 0.1
    """Seconds of handling after which a step takes no further envelope and
    commits: a backlog of quick items goes ``batch_limit`` to an fsync, slow
    ones still commit (and their events ship) about this often."""
    policy: RestartPolicy = field(default_factory=lambda: RestartPolicy(max_restarts=5, window=60))
    """Restarts of a run actor that broke on something else than a handler
    (the inbox, say); a handler's failures are attempts of its item, counted
    by the failure policy, and never crash the actor."""
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
        self._supervisor = Supervisor(stop_grace=self.config.stop_grace)
        self._policy = LEGACY_POLICY
        self._suspects: set[str] = set()
        """Rows of a batch during which an earlier process died: each is
        processed alone, so that another death is charged to its own row."""
        self._waited: tuple[str, int] | None = None
        """The item, and its failed attempts, whose backoff was waited out."""
        self._trouble = Retry(_TROUBLE)
        self._wake = Wakeup()
        self._stepping = anyio.Lock()  # held for one step; adopt() waits for it
        self.idle = Flag()
        """Set while the scheduler has nothing it can process."""

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
            await self._supervisor.stop_all()
        log.info("adopted the hub's state of %d run(s), up to seq %d", len(runs), floor)
        self.kick()

    async def _schedule(self) -> None:
        while True:
            await self._wake.wait()
            self.idle.clear()
            while True:
                async with self._stepping:
                    pause = await self._step()
                if pause is None:
                    break
                if pause > 0:
                    # Not within the step: a takeover does not wait for it.
                    await anyio.sleep(pause)
            self.idle.set()

    async def _step(self) -> float | None:
        """One batch processed; None when there is none, else the seconds to
        wait before the next one (0: none)."""
        # A run that ended cancelled its live children in its commit: their
        # actors hold a status from before that.
        for cancelled in self.inbox.take_cancelled():
            child = self._supervisor.get(cancelled)
            if child is not None:
                await child.stop()
        batch = await self.inbox.next_batch(self.config.batch_limit)
        if not batch:
            return None
        first = batch[0]
        if first.attempts or first.dispatch_id in self._suspects:
            batch = batch[:1]  # its next death, or failure, is its own
            pause = self._backoff(first)
            if pause > 0:
                return pause
        run_id = first.run_id
        ref = await self._actor(run_id)
        await self.inbox.mark_in_flight([p.dispatch_id for p in batch])
        try:
            await ref.ask(batch, timeout=self._ask_timeout())
        except ActorStopped:
            # Past its restart budget: the next step starts a fresh one.
            await ref.stop()
            log.warning("run %s: its actor stopped; starting another", run_id)
            return self._broke()
        except Exception as exc:
            # Not a handler's failure (those are attempts): the inbox, say.
            # The kernel restarts the actor; the next step tries again.
            log.warning("run %s: processing broke: %r", run_id, exc)
            return self._broke()
        self._trouble.succeeded()
        self.on_commit()
        return 0.0

    def _backoff(self, p: Pending) -> float:
        """The wait before the retry of ``p`` (0: none, or waited out already)."""
        if not p.attempts or p.attempts >= self._policy.max_attempts:
            return 0.0  # never failed, or the policy applies now
        if self._waited == (p.dispatch_id, p.attempts):
            return 0.0
        self._waited = (p.dispatch_id, p.attempts)
        return retry_delay(self._policy, p.attempts)

    def _broke(self) -> float:
        self._trouble.failed()
        self.on_commit()
        return self._trouble.delay

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
        return self.handler_timeout * self.config.batch_limit + 60.0


_policy = msgspec.json.Decoder(FailurePolicy)
