"""Waiting in tests: poll a condition under a deadline, never sleep and hope."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")


async def wait_for(
    condition: Callable[[], T | Awaitable[T]],
    *,
    timeout: float = 20.0,
    interval: float = 0.02,
    what: str = "the condition",
    explain: Callable[[], str] | None = None,
) -> T:
    """Call ``condition`` (plain or async) every ``interval`` seconds until it
    returns something true, and return that.

    Past ``timeout`` it fails the test with an AssertionError naming ``what``.
    ``explain`` adds what the test can tell about the failure (client states,
    a server's log) to that message. The default deadline suits real processes
    on a loaded machine; in-memory conditions are met in milliseconds, so it
    only bounds a failing test.
    """
    try:
        with anyio.fail_after(timeout):
            while True:
                value = condition()
                if inspect.isawaitable(value):
                    value = await value
                if value:
                    return value
                await anyio.sleep(interval)
    except TimeoutError:
        detail = f"\n{explain()}" if explain is not None else ""
        raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}") from None
