"""Session frames: the hello and its answers, sleep, fencing, the hub's boot."""

from __future__ import annotations

import msgspec

from .._reasons import OnFailure
from ._format import SUPPORTED_FORMATS, _Frame


class Hello(_Frame, tag=True, kw_only=True):
    """sidecar -> hub (``hub.hello``). Without ``nonce``/``signature`` the hub
    answers Challenge; signed over :func:`runtime.hello_message` it answers
    Welcome or Refused."""

    deployment_id: str
    instance_id: str
    public_key: str
    nonce: str | None = None
    signature: bytes | None = None
    formats: list[int] = msgspec.field(default_factory=lambda: list(SUPPORTED_FORMATS))
    takeover: bool = False
    home: str = ""
    """Where this process keeps the deployment's state: an id of the state
    directory itself (not of any file in it), so a copy of the directory has
    another home. ``instance_id`` is new with every process start. An older
    sidecar sends no home: its (persistent) instance id stands for it."""
    previous_instance: str = ""
    """The persistent instance id an earlier release kept in the restore
    record, sent until the first welcome: a deployment owned before homes
    were recorded is taken back at once by a process in its own directory."""


class Challenge(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to an unsigned Hello: the nonce its signed
    Hello must sign (single use, 30 s)."""

    nonce: str


class FailurePolicy(msgspec.Struct, kw_only=True, frozen=True):
    """A deployment's retry budget and what happens past it
    (docs/design.md section 5, "When a handler fails")."""

    on_failure: str = OnFailure.SUSPEND
    """runtime.OnFailure: ``suspend``, ``park`` or ``fail``."""
    max_attempts: int = 5
    """Handler calls an item gets (a crash of the sidecar while it was being
    processed counts as one) before ``on_failure`` applies."""
    max_backoff: float = 60.0
    """Seconds at most between two attempts (the backoff doubles from 0.1 s,
    with jitter)."""
    handler_timeout: float = 300.0
    """Seconds a handler call may run; a longer one is a failed attempt."""
    max_concurrent_runs: int = 16
    """Handler calls of the deployment at once, each of another run (a run's
    items stay in its seq order). Not a failure setting, but one of the
    deployment's run settings the sidecar is told the same way."""


LEGACY_POLICY = FailurePolicy(on_failure=OnFailure.FAIL)
"""The policy of a sidecar whose hub sends none (an older hub knows no
suspended run nor parked dispatch): a run fails past its budget."""


class Welcome(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to a signed Hello that owns the deployment:
    the session every later frame is stamped with, and its owner epoch."""

    session_id: str
    owner_epoch: int
    hub_boot_id: str
    floor_seq: int = 0
    """Every dispatch of the deployment with ``seq <= floor_seq`` is settled at
    the hub (processed or cancelled), so the sidecar never waits for one of
    them (an inbox from release 1, or one that lags the hub). 0: no claim."""
    from_hub: bool = False
    """Ownership came here from another home: the local state of every run is
    not the owner's. The sidecar replaces it with the hub's (``StateGet``) and
    drops its unshipped events before it acts; the hub delivers again
    everything it did not apply."""
    policy: FailurePolicy | None = None
    """The deployment's failure policy (None from an older hub:
    :data:`LEGACY_POLICY`); a change comes later as :class:`SetPolicy`."""


class Sleep(_Frame, tag=True, kw_only=True):
    """sidecar -> hub (``hub.sleep``), answered by Asleep or Refused: the
    sidecar has had nothing to do for its idle time (every item processed,
    every event taken by the hub), takes no more deliveries, and asks to stop.
    The hub grants it only while the deployment has no dispatch waiting for
    delivery, in the transaction that marks the deployment asleep; else it
    answers ``Refused(busy)`` and the sidecar goes on as before."""

    deployment_id: str = ""
    session_id: str
    owner_epoch: int


class Asleep(_Frame, tag=True, kw_only=True):
    """hub -> sidecar, the answer to a granted Sleep: the deployment is asleep
    from now, its session ended. The sidecar exits with
    ``SidecarExit.ASLEEP``; the deployment's next item (mail, timer, schedule,
    child event, decision) has its supervisor start it again."""

    deployment_id: str = ""


class Fenced(_Frame, tag=True, kw_only=True):
    """hub -> sidecar on its inbound subject, unanswered: the deployment was
    deleted or moved to another owner. A notice, not a proof: the sidecar
    says hello again, and the hub's answer decides whether it stops."""

    deployment_id: str
    owner_epoch: int = 0
    reason: str = ""


class Refused(_Frame, tag=True, kw_only=True):
    """Any request the hub will not serve. ``reason`` is a code (runtime.Reason),
    ``detail`` the prose that goes with it."""

    reason: str
    detail: str = ""


class HubBoot(_Frame, tag=True, kw_only=True):
    """hub -> all (``hub.announce``): a hub (re)started; sidecars re-hello."""

    boot_id: str
