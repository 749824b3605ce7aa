"""Replay: a run's recorded items through new workflow code, without effects.

The hub gathers what it holds of a run's history (hub/store/views/history.py) and
starts ``python -m sidecar.replay`` (:mod:`sidecar.replay`), a scratch
process, with one :class:`ReplayJob` as JSON on stdin. The job's sources are
written to a temporary directory and loaded like a sidecar loads them; each
item is built and handed to the handler with the code a sidecar uses
(``item_of``, :class:`Context`), starting from the recorded start state.
Effects are never performed: a handler's sends, spawns, approval requests
and timers only become events in ``ctx.events`` (a sidecar ships them after
its commit, and there is none here), and ``spawn`` gets the child ids the
run recorded, in order, instead of asking the hub. No step is called: each
returns (or raises) what the run recorded for the item.

After each item its steps, its state, its effects and the run's end are
compared with what the run recorded (:mod:`._compare`); the first item
where they differ ends the replay. A ``resume`` item is skipped (it never
reached a handler and changed nothing), as is a ``cancel`` that terminated
its run; any other ``cancel`` is replayed, its end not compared (the run
ended cancelled whatever the call said); a parked item is replayed like a
failed one: the recorded run raised on it.
The answer is one JSON document on stdout: a :class:`ReplayReport` (exit 0), or a
:class:`ReplayFailureReport` (exit 1) when the code does not load, ``migrate_state``
fails, or the job is unreadable. Whatever the workflow code prints goes to
stderr, so it cannot garble the answer.

This is no sandbox: the code runs as the hub's user, with the environment a
sidecar gets (less the NATS URL) and a temporary working directory
(docs/replay.md).
"""

from __future__ import annotations

import datetime
import logging
from pathlib import Path
from typing import Any

import anyio
import msgspec

from runtime import (
    RESUME_KIND,
    RecordedEffect,
    RecordedEnd,
    ReplayFailureReport,
    ReplayItem,
    ReplayJob,
    ReplayReport,
    Sources,
)
from runtime.sidecar_contract import effect_of
from runtime.wire import CANCEL_KIND

from .._errors import EntrypointError, WorkflowLoadError
from ..execution import (
    Context,
    Handler,
    StateMigration,
    cancel_order,
    check_events,
    derived_id,
    item_of,
    load_workflow,
    mail_domain,
    state_migration,
    state_snapshot,
)
from ..storage import Envelope
from ._compare import Call, difference

log = logging.getLogger("mailrun.replay")

SCRATCH_DEPLOYMENT = "scratch_replay"
"""Names the package the sources load as (``mailrun_workflow_replay``):
not the deployment's, this is no sidecar."""
EXIT_REPORT = 0
EXIT_FAILURE = 1


class ReplayFailure(Exception):
    """The replay cannot be made (not a difference): answered as a ReplayFailureReport."""

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(detail)
        self.error = error
        self.detail = detail


# --- one handler call -----------------------------------------------------------


class _RecordedChildren:
    """``spawn`` gets the child ids the run recorded for the item, in order, so
    a state holding one compares equal; past them, an id of the usual shape."""

    def __init__(self, effects: list[RecordedEffect]) -> None:
        self._ids = [e.child_run_id for e in effects if e.kind == "spawn" and e.child_run_id]

    async def mint_child(self, parent_run_id: str, request_id: str) -> str:
        if self._ids:
            return self._ids.pop(0)
        return derived_id("run", f"replay:{request_id}")


class _ReplayContext(Context):
    """A handler's ``ctx`` in a replay: steps return what the run recorded
    (no recorder: a step without a record raises ``StepNotRecorded``), and
    the timers set ``after=`` a delay are noted, their due time being the
    clock's at the call."""

    def __init__(self, item: ReplayItem, **kwargs: Any) -> None:
        super().__init__(**kwargs, steps={s.name: s for s in item.steps}, recorder=None)
        self.relative: set[str] = set()
        """The event ids of the timers set ``after=`` a delay."""

    def set_timer(
        self,
        name: str,
        *,
        after: float | datetime.timedelta | None = None,
        at: float | datetime.datetime | None = None,
        payload: Any = None,
    ) -> float:
        due_at = super().set_timer(name, after=after, at=at, payload=payload)
        if after is not None:
            self.relative.add(self.events[-1].event_id)
        return due_at


async def _call(job: ReplayJob, handler: Handler, item: ReplayItem, state: dict[str, Any]) -> Call:
    assert item.body is not None
    envelope = Envelope(
        dispatch_id=item.dispatch_id,
        deployment_id=job.deployment_id,
        run_id=job.run_id,
        seq=item.seq,
        kind=item.kind,
        message_id=item.message_id,
        sender=item.sender,
        subject=item.subject,
        body=item.body,
        context=item.context,
    )
    ctx = _ReplayContext(
        item,
        run_id=job.run_id,
        deployment_id=job.deployment_id,
        dispatch_id=item.dispatch_id,
        # A copy: the handler may change it in place and still raise.
        state=msgspec.json.decode(msgspec.json.encode(state)),
        minter=_RecordedChildren(item.recorded.effects),
        mail_domain=mail_domain(job.address),
    )
    raised: str | None = None
    with anyio.move_on_after(job.item_timeout) as scope:
        try:
            await handler(ctx, item_of(envelope))
            after = _checked_state(ctx.state)
            check_events(ctx.events)
        except Exception as exc:
            raised = f"{type(exc).__name__}: {exc}"
    if scope.cancelled_caught:
        raised = f"HandlerTimeout: handler did not return within {job.item_timeout:g}s"
    steps, moved = list(ctx.steps.names), bool(ctx.steps.moved)
    if raised is not None:
        return Call(state=state, effects=[], end=None, raised=raised, steps=steps, moved=moved)
    effects = [e for e in (effect_of(ev, ctx.relative) for ev in ctx.events) if e is not None]
    end = None
    if item.kind == CANCEL_KIND:
        pass  # the run ended cancelled whatever the call said: not compared
    elif ctx.completed:
        end = RecordedEnd(kind="completed", result=ctx.result)
    elif ctx.failed:
        end = RecordedEnd(kind="failed", error=ctx.error)
    return Call(state=after, effects=effects, end=end, steps=steps, moved=moved)


def _terminates(item: ReplayItem) -> bool:
    """A ``cancel`` that ended its run without a handler call."""
    if item.kind != CANCEL_KIND or item.body is None:
        return False
    envelope = Envelope(
        dispatch_id=item.dispatch_id, deployment_id="", address="", kind=item.kind, body=item.body
    )
    return cancel_order(envelope)[1]


def _checked_state(state: object) -> dict[str, Any]:
    """The state as the sidecar would commit it (else the call fails, as it
    does in a sidecar), decoded back: a copy the next item may change."""
    return state_snapshot(state).take()


# --- the replay ---------------------------------------------------------------


def _load(job: ReplayJob, src_dir: Path) -> tuple[Handler, StateMigration | None]:
    """The handler and the entrypoint module's ``migrate_state`` (or None)."""
    sources = Sources(entrypoint=job.entrypoint, files=job.files)
    try:
        handler = load_workflow(sources, src_dir, SCRATCH_DEPLOYMENT)
        return handler, state_migration(SCRATCH_DEPLOYMENT, job.entrypoint, 1)
    except (WorkflowLoadError, EntrypointError) as exc:
        raise ReplayFailure("load_failed", str(exc)) from exc


async def _migrated(
    job: ReplayJob, migrate: StateMigration, state: dict[str, Any]
) -> dict[str, Any]:
    """``migrate_state(state, from_version)`` on the start state, as a sidecar
    calls it when a new version takes a run over: ``from_version`` is the
    version that recorded the first item (1 for one from before versions),
    and the hook returns the state."""
    from_version = max(job.items[0].version if job.items else 0, 1)
    try:
        with anyio.fail_after(job.item_timeout):
            migrated = await migrate(state, from_version)
        return _checked_state(migrated)
    except Exception as exc:
        raise ReplayFailure("migrate_failed", f"migrate_state raised {exc!r}") from exc


async def replay(job: ReplayJob, src_dir: Path) -> ReplayReport:
    """Replay ``job``'s items through its sources (written under ``src_dir``).

    Raises :class:`ReplayFailure` when the code does not load or
    ``migrate_state`` fails."""
    handler, migrate = _load(job, src_dir)
    state = msgspec.json.decode(msgspec.json.encode(job.start_state))
    if migrate is not None and job.start != "beginning":
        # A recorded state, which the new code takes over. From the beginning
        # there is none: a sidecar calls no hook before a run's first item.
        state = await _migrated(job, migrate, state)
    report = ReplayReport(run_id=job.run_id, differs=False, replayed=0, start=job.start)
    report.skipped = list(job.skipped)
    for item in job.items:
        if item.kind == RESUME_KIND or _terminates(item):
            continue  # never a handler's: nothing to compare
        if item.body is None:
            state = item.recorded.state  # not replayable: go on from what it recorded
            continue
        call = await _call(job, handler, item, state)
        report.replayed += 1
        report.first_step = item.step if report.first_step is None else report.first_step
        report.last_step = item.step
        differs = difference(item, call)
        if differs is not None:
            report.differs, report.difference = True, differs
            break
        state = call.state
    return report


_job_decoder = msgspec.json.Decoder(ReplayJob)


def run_job(raw: bytes, src_dir: Path) -> tuple[int, bytes]:
    """The exit status and stdout of the scratch process for the job ``raw``."""
    try:
        job = _job_decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        failure = ReplayFailureReport(error="bad_job", detail=f"unreadable replay job: {exc}")
        return EXIT_FAILURE, msgspec.json.encode(failure)
    try:
        report = anyio.run(replay, job, src_dir)
    except ReplayFailure as exc:
        return EXIT_FAILURE, msgspec.json.encode(
            ReplayFailureReport(error=exc.error, detail=exc.detail)
        )
    return EXIT_REPORT, msgspec.json.encode(report)
