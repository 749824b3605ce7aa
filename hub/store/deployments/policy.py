"""A deployment's failure policy: what its sidecar does with an item whose
handler keeps failing (docs/design.md section 5, "When a handler fails").

Four columns of the deployment row: ``on_failure`` (``suspend``, ``park``
or ``fail``), ``max_attempts``, ``max_backoff`` and ``handler_timeout``; and
a fifth the sidecar is told the same way, though no failure setting:
``max_concurrent_runs``, its handler calls at once.
Set at create, changed by ``PATCH`` (any subset), each change checked whole
before anything is written: a value out of its range changes nothing. The
sidecar is given the policy in every Welcome, and a change as SetPolicy
(``hub.wire.delivery.policies``).
"""

from __future__ import annotations

import math

import msgspec

from runtime.wire import FailurePolicy, OnFailure, anchor_is_live

from ..._errors import DeploymentNotLive, InvalidPolicy, UnknownDeployment
from ..sql import Tx, sql

MAX_ATTEMPTS = (1, 100)
MAX_BACKOFF = (0.0, 86400.0)
HANDLER_TIMEOUT = (0.1, 86400.0)
MAX_CONCURRENT_RUNS = (1, 1024)


class PolicyChange(msgspec.Struct, kw_only=True, frozen=True):
    """Some of a policy's settings (None: the one in force stays)."""

    on_failure: str | None = None
    max_attempts: int | None = None
    max_backoff: float | None = None
    handler_timeout: float | None = None
    max_concurrent_runs: int | None = None

    def is_empty(self) -> bool:
        return all(getattr(self, name) is None for name in self.__struct_fields__)


_POLICY = sql(
    "SELECT on_failure, max_attempts, max_backoff, handler_timeout, max_concurrent_runs"
    " FROM deployment WHERE id = ?"
)
_LIVE = sql(
    "SELECT a.status FROM deployment d JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1"
    " WHERE d.id = ?"
)
_SET = sql(
    "UPDATE deployment SET on_failure = COALESCE(:on_failure, on_failure),"
    " max_attempts = COALESCE(:max_attempts, max_attempts),"
    " max_backoff = COALESCE(:max_backoff, max_backoff),"
    " handler_timeout = COALESCE(:handler_timeout, handler_timeout),"
    " max_concurrent_runs = COALESCE(:max_concurrent_runs, max_concurrent_runs)"
    " WHERE id = :deployment AND deleted_at IS NULL"
)


def _within(name: str, value: float, bounds: tuple[float, float]) -> None:
    low, high = bounds
    if not (math.isfinite(value) and low <= value <= high):
        raise InvalidPolicy(f"'{name}' must be from {low:g} to {high:g}, not {value!r}")


def check_policy(change: PolicyChange) -> PolicyChange:
    """``change`` if every setting it gives is valid; InvalidPolicy naming the first that is not."""
    if change.on_failure is not None and change.on_failure not in set(OnFailure):
        raise InvalidPolicy(
            f"'on_failure' must be one of {', '.join(OnFailure)}, not {change.on_failure[:40]!r}"
        )
    if change.max_attempts is not None:
        _within("max_attempts", change.max_attempts, MAX_ATTEMPTS)
    if change.max_backoff is not None:
        _within("max_backoff", change.max_backoff, MAX_BACKOFF)
    if change.handler_timeout is not None:
        _within("handler_timeout", change.handler_timeout, HANDLER_TIMEOUT)
    if change.max_concurrent_runs is not None:
        _within("max_concurrent_runs", change.max_concurrent_runs, MAX_CONCURRENT_RUNS)
    return change


def read_policy(tx: Tx, deployment_id: str) -> FailurePolicy:
    """The deployment's policy, as its sidecar is told it."""
    row = tx.fetch_one(_POLICY, (deployment_id,))
    if row is None:
        raise UnknownDeployment(f"no deployment {deployment_id!r}")
    return FailurePolicy(
        on_failure=str(row["on_failure"]),
        max_attempts=int(row["max_attempts"]),
        max_backoff=float(row["max_backoff"]),
        handler_timeout=float(row["handler_timeout"]),
        max_concurrent_runs=int(row["max_concurrent_runs"]),
    )


def write_policy(tx: Tx, deployment_id: str, change: PolicyChange) -> None:
    """Inside a write transaction: the settings ``change`` gives, checked."""
    check_policy(change)
    params = {**msgspec.structs.asdict(change), "deployment": deployment_id}
    tx.execute(_SET, params)


def set_policy(tx: Tx, deployment_id: str, change: PolicyChange) -> FailurePolicy:
    """Inside a write transaction: change a live deployment's policy; the
    policy now in force."""
    row = tx.fetch_one(_LIVE, (deployment_id,))
    if row is None:
        raise UnknownDeployment(f"no deployment {deployment_id!r}")
    if not anchor_is_live(str(row["status"])):
        raise DeploymentNotLive(f"deployment {deployment_id} is deleted")
    write_policy(tx, deployment_id, change)
    return read_policy(tx, deployment_id)
