"""SIGTERM and SIGINT as cancellation: how every mailrun process stops."""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc

log = logging.getLogger("mailrun.signals")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@asynccontextmanager
async def cancel_on_signals(
    *, graceful: Callable[[], object] | None = None
) -> AsyncIterator[list[signal.Signals]]:
    """Run the block until SIGTERM or SIGINT cancels it.

    With ``graceful``, the first signal calls it instead, asking the block to
    stop in order by itself, and a second one cancels. Yields the signals
    received so far (a CLI interrupted by one exits with 128 + its number).
    The handlers are in place before the block starts and removed when it ends.
    """
    received: list[signal.Signals] = []
    async with anyio.create_task_group() as tg:
        await tg.start(_watch, tg.cancel_scope, graceful, received)
        yield received
        tg.cancel_scope.cancel()


async def _watch(
    scope: anyio.CancelScope,
    graceful: Callable[[], object] | None,
    received: list[signal.Signals],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    with anyio.open_signal_receiver(*_STOP_SIGNALS) as signals:
        task_status.started()
        async for signum in signals:
            sig = signal.Signals(signum)
            received.append(sig)
            if len(received) == 1:
                log.info("%s: stopping", sig.name)
                if graceful is not None:
                    graceful()
                    continue
            else:
                log.warning("%s again: stopping now", sig.name)
            scope.cancel()
            return
