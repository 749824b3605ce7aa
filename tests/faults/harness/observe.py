"""Reading a running system's outcome for the checker, once it has quiesced.

Works on anything with the hub's store and API at hand: the e2e harness's
``Up`` and the fault ``Cluster`` both offer ``query`` (read-only SQL on
hub.db) and ``run`` (``GET /runs/{id}``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection
from typing import Any, Protocol

from tests.support import wait_for

from .checker import (
    CheckResult,
    HubDispatch,
    Liveness,
    check,
    check_timers,
    processed_from_state,
)
from .workload import History

_OPEN = ("reserved", "delivered")
TERMINAL = "workflow_run_terminal"


class HubView(Protocol):
    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]: ...

    async def run(self, run_id: str) -> Any: ...


def open_dispatches(hub: HubView, deployment_id: str) -> int:
    """Dispatches accepted for the deployment and not yet processed (nor
    cancelled), and timers of its runs not fired yet (each becomes one).
    One statement, so one snapshot: a timer fired between two reads would
    be in neither."""
    [(n,)] = hub.query(
        "SELECT (SELECT COUNT(*) FROM workflow_run_dispatch WHERE deployment_id = ?"
        " AND status IN (?, ?)) + (SELECT COUNT(*) FROM timer WHERE deployment_id = ?)",
        deployment_id,
        *_OPEN,
        deployment_id,
    )
    return int(n)


async def wait_quiesced(hub: HubView, deployment_id: str, *, timeout: float = 30.0) -> float:
    """Wait until the hub shows every accepted dispatch of the deployment
    processed and every timer of its runs fired; return how long that took
    (the recovery time)."""
    start = time.monotonic()
    try:
        await wait_for(lambda: not open_dispatches(hub, deployment_id), timeout=timeout)
    except AssertionError:
        left = open_dispatches(hub, deployment_id)
        raise AssertionError(
            f"{deployment_id}: {left} dispatches still unprocessed after {timeout}s"
        ) from None
    return time.monotonic() - start


def hub_accepted(hub: HubView, deployment_id: str) -> dict[str, HubDispatch]:
    """Message id -> the dispatch the hub's store holds for it."""
    rows = hub.query(
        "SELECT message_id, id, seq, status, last_error FROM workflow_run_dispatch"
        " WHERE deployment_id = ? AND message_id IS NOT NULL",
        deployment_id,
    )
    return {
        mid: HubDispatch(dsp, int(seq), refused=_refused(status, error), open=status in _OPEN)
        for mid, dsp, seq, status, error in rows
    }


def _refused(status: str, error: str | None) -> str | None:
    """A cancelled dispatch's reason when its run refused it (it had ended)."""
    return error if status == "cancelled" and error == TERMINAL else None


def top_level_runs(hub: HubView, deployment_id: str) -> list[str]:
    rows = hub.query(
        "SELECT id FROM workflow_run WHERE deployment_id = ? AND is_top_level = 1"
        " ORDER BY created_at",
        deployment_id,
    )
    return [str(run_id) for (run_id,) in rows]


async def check_deployment(
    hub: HubView,
    history: History,
    deployment_id: str,
    *,
    timeout: float = 30.0,
    ignore: Collection[str] = (),
    liveness: Liveness | None = None,
) -> CheckResult:
    """Wait until quiesced, then check ``history`` against the deployment's run.

    ``ignore``: subjects of mails sent outside the workload (a warm-up). A
    deployment that does not quiesce within ``timeout`` is checked as it is:
    what it accepted and never processed shows as ``stuck``."""
    with contextlib.suppress(AssertionError):  # the check names what is left open
        await wait_quiesced(hub, deployment_id, timeout=timeout)
    runs = top_level_runs(hub, deployment_id)
    processed = []
    state: dict[str, Any] = {}
    ended = False
    if runs:
        run = await hub.run(runs[0])
        state, ended = run["state"] or {}, run["status"] in ("completed", "failed", "cancelled")
        processed = [p for p in processed_from_state(state) if p.message_id not in ignore]
    result = check(
        history,
        processed,
        runs={deployment_id: len(runs)},
        hub_accepted=hub_accepted(hub, deployment_id),
        liveness=liveness,
    )
    return check_timers(result, state, run_ended=ended)
