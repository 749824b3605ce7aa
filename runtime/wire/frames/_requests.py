"""The sidecar's requests to the hub, with their answers: its run events, a
child run's id, and the hub's state of its runs."""

from __future__ import annotations

from typing import Any

import msgspec

from .._events import Event, StepRecorded
from ._format import _Frame


class MintChild(_Frame, tag=True, kw_only=True):
    """sidecar -> hub (``hub.mint``): mint a child run before spawning it."""

    parent_run_id: str
    request_id: str
    deployment_id: str = ""
    session_id: str = ""
    owner_epoch: int = 0


class Minted(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to a MintChild: the child run's id (the same
    one again for the same request)."""

    run_id: str


class StateGet(_Frame, tag=True, kw_only=True):
    """sidecar -> hub (``hub.state``): a page of the hub's applied state of the
    deployment's runs, ordered by run id, after ``after_run_id``."""

    deployment_id: str
    session_id: str
    owner_epoch: int
    after_run_id: str = ""


class RunSnapshot(msgspec.Struct, kw_only=True):
    """What the hub applied of one run: state as of ``last_seq``."""

    run_id: str
    status: str
    state: dict[str, Any] = msgspec.field(default_factory=dict)
    last_seq: int = 0
    result: Any = None
    error: str | None = None
    last_step: int = 0
    """The run's count of processed items as of ``state`` (DispatchProcessed.step)."""
    approvals: list[str] = msgspec.field(default_factory=list)
    """The approvals the run waits for (status ``waiting``): their decisions
    are processed at once, anything else is held until none is left."""
    parent_run_id: str | None = None
    entrypoint: str | None = None
    """A child run's handler (``module:attr`` in the deployment's sources)."""
    version: int = 0
    """The workflow version that processed the run's latest item (0: none yet)."""
    steps: list[StepRecorded] = msgspec.field(default_factory=list)
    """The steps recorded for the run's dispatches the hub has not settled: a
    new owner processing one of them again returns these results instead of
    calling the steps' functions again. Empty from an older hub."""


class RunStates(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to a StateGet: one page of the hub's
    RunSnapshots (``more``: another page follows)."""

    runs: list[RunSnapshot]
    floor_seq: int = 0
    more: bool = False
    settled: list[int] = msgspec.field(default_factory=list)
    """Seqs above ``floor_seq`` that are settled all the same (a waiting run
    held the dispatches before them): the new owner never waits for them."""


class RunEvents(_Frame, tag=True, kw_only=True):
    """sidecar -> hub (``hub.events``), answered by EventsAck or Refused."""

    deployment_id: str = ""
    session_id: str
    owner_epoch: int
    events: list[Event]


class EventsAck(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to a RunEvents: the ids of the events it has
    taken (applied now or before), which the sidecar sends no more."""

    ids: list[str]
    floor_seq: int = 0
    """As a Welcome's: every dispatch with ``seq <= floor_seq`` is settled at
    the hub once these events are applied (0: no claim). The sidecar raises
    its position to it: a release 1 envelope processed before the hub's frame
    could tell its seq leaves a gap nothing else would close until the next
    session. Added within format 2; an older reader ignores it."""
