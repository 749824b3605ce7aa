"""A handler's failure on one item: one more failed attempt, and past the
retry budget the deployment's ``on_failure`` (suspend, park or fail).

The run actor calls :func:`attempt_failed` when a handler call raised or
overran its timeout, and :func:`give_up` for an item whose budget was spent
before its call (by a process that died on it, say). Both only record in the
:class:`~sidecar.execution._batch.Batch` what its commit writes: the attempt
and its error, and what the policy makes of the item and its run (a ``cancel`` ends its
run cancelled whatever the policy).
"""

from __future__ import annotations

import logging
import time

from runtime.wire import CANCEL_KIND, FailurePolicy, OnFailure, clip_text

from .._errors import EntrypointError, LimitExceeded, RunStateUnreadable, WorkflowLoadError
from ..storage import Pending
from ._batch import Batch
from .handler_io import cancel_order

log = logging.getLogger("mailrun.sidecar.runs")

FINAL = (LimitExceeded, EntrypointError, WorkflowLoadError, RunStateUnreadable)
"""Failures a retry cannot fix: the same call makes the same too-large value
again, an entrypoint stays missing, code that does not load stays so, a
stored state stays unreadable. The policy applies at once."""


def attempt_failed(policy: FailurePolicy, p: Pending, exc: Exception, batch: Batch) -> None:
    """The handler's call on ``p`` failed: one more attempt, with its error;
    past the budget, or for an error a retry cannot fix, the policy."""
    text = clip_text(f"{type(exc).__name__}: {exc}")
    attempts = p.attempts + 1
    batch.commit.attempt = (p.dispatch_id, text)
    final = isinstance(exc, FINAL)
    # With its traceback: a failing handler is someone's bug to find.
    log.warning(
        "run %s: attempt %d of %d on %s failed%s: %s",
        p.run_id,
        attempts,
        policy.max_attempts,
        p.dispatch_id,
        " (a retry cannot fix it)" if final else "",
        text,
        exc_info=exc,
    )
    if final or attempts >= policy.max_attempts:
        give_up(policy, p, batch, text, attempts)


def give_up(policy: FailurePolicy, p: Pending, batch: Batch, error: str, attempts: int) -> None:
    """The deployment's ``on_failure`` for ``p``, whose handler failed
    ``attempts`` times (the last with ``error``); a policy this sidecar does
    not know fails the run, as before policies. A ``cancel`` is no item to
    set aside: the run ends cancelled all the same, the error kept."""
    now = time.time()
    if p.envelope is not None and p.envelope.kind == CANCEL_KIND:
        reason, _ = cancel_order(p.envelope)
        batch.terminate(p, now, reason, error)
        log.error("run %s: cancelled after %d failed attempt(s): %s", p.run_id, attempts, error)
        return
    if policy.on_failure == OnFailure.PARK:
        batch.park(p, now, error)
    elif policy.on_failure == OnFailure.SUSPEND:
        batch.suspend(p, now, attempts, error)
    else:
        batch.fail(p, now, error)
    log.error("run %s: %s after %d attempt(s): %s", p.run_id, policy.on_failure, attempts, error)
