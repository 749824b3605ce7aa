"""``ctx.step``: an external call made once per item, whatever happens after it.

A step's outcome (its JSON-able result, or its error once its retries are
spent) is recorded as soon as its function returns, before the item
commits: the sidecar writes it to the inbox and the outbox in one
transaction of its own (a :class:`StepRecorded` event, shipped to the hub
like every event). Processing the same item again (a retry of the handler,
a crash of the sidecar, a new owner given the hub's records) finds the step
by its name and returns what was recorded, without calling the function.

What a step returns is what the record holds: the result goes through JSON
on the first call too, so a tuple comes back as a list every time, not only
on a replay.
"""

from __future__ import annotations

import inspect
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Protocol

import anyio
import anyio.to_thread
import msgspec

from runtime import new_id, tracing
from runtime.wire import MAX_STEP_RESULT, StepRecorded, clip_text, encoded_size

from .._errors import (
    DuplicateStep,
    InvalidStep,
    LimitExceeded,
    StateNotSerializable,
    StepFailed,
    StepNotRecorded,
)

MAX_STEP_NAME = 200
"""Characters in a step's (or a timer's) name."""


class StepRetry(msgspec.Struct, frozen=True, kw_only=True):
    """How often a failing step is called before it fails for good: up to
    ``attempts`` calls, ``backoff`` seconds after the first failure, doubling
    (with jitter) up to ``max_backoff``. An exception the function raises
    counts as a failure; a cancellation (the handler timeout) does not, and
    records nothing."""

    attempts: int = 3
    backoff: float = 0.5
    max_backoff: float = 30.0

    def check(self) -> None:
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise InvalidStep(f"retry attempts must be 1 or more, not {self.attempts!r}")
        for field in ("backoff", "max_backoff"):
            value = getattr(self, field)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise InvalidStep(f"retry {field} must be a finite number >= 0, not {value!r}")

    def delay(self, failed: int) -> float:
        """Seconds to wait after the ``failed``-th failed call."""
        base: float = min(self.backoff * 2.0 ** (failed - 1), self.max_backoff)
        return base * random.uniform(0.5, 1.0)


DEFAULT_STEP_RETRY = StepRetry()


class StepRecorder(Protocol):
    """Where a step's outcome is made durable before the step returns (the
    sidecar's inbox; the test kit's memory)."""

    async def record(self, step: StepRecorded) -> None: ...


def check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME:
        raise InvalidStep(f"a {what} name is a string of 1 to {MAX_STEP_NAME} characters")
    return name


async def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    # A blocking call (an HTTP client, a database driver) must not stall the
    # other runs: it runs in a worker thread. A handler timeout abandons it.
    result = await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), abandon_on_cancel=True)
    if inspect.isawaitable(result):
        result = await result
    return result


def _kept(name: str, result: Any) -> Any:
    """``result`` as its record will return it (through JSON), or the typed
    error that says why it cannot be recorded."""
    what = f"the result of step {name!r}"
    try:
        data = msgspec.json.encode(result)
    except (TypeError, msgspec.EncodeError, OverflowError) as exc:
        raise StateNotSerializable(f"{what} is not JSON-able: {exc}") from exc
    kept = msgspec.json.decode(data)
    size = encoded_size(kept)
    if size > MAX_STEP_RESULT.bytes:
        raise LimitExceeded(what, size, MAX_STEP_RESULT)
    return kept


class Steps:
    """The steps of one handler call: their names in order, what was recorded
    when the item was processed before, and where new outcomes go."""

    def __init__(
        self,
        *,
        run_id: str,
        dispatch_id: str,
        recorded: Mapping[str, StepRecorded],
        recorder: StepRecorder | None,
        faults: Mapping[str, BaseException] | None = None,
        sleep: Callable[[float], Awaitable[Any]] = anyio.sleep,
    ) -> None:
        self._run_id = run_id
        self._dispatch_id = dispatch_id
        self._recorded = recorded
        self._recorder = recorder
        self._faults = faults or {}
        self._sleep = sleep
        self.names: list[str] = []
        """The steps of this call, in the order it took them."""
        self.moved: list[tuple[str, int, int]] = []
        """Recorded steps found at another place: (name, recorded index, index now)."""
        self.taken: list[StepRecorded] = []
        """The outcome of every step of this call (recorded before or now), in order."""

    async def run(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: StepRetry | None,
    ) -> Any:
        check_name(name, "step")
        if not callable(fn):
            raise InvalidStep(f"step {name!r}: {fn!r} is not callable")
        policy = DEFAULT_STEP_RETRY if retry is None else retry
        if not isinstance(policy, StepRetry):
            raise InvalidStep(f"step {name!r}: retry must be a StepRetry, not {policy!r}")
        policy.check()
        if name in self.names:
            raise DuplicateStep(f"step {name!r} was taken already while this item was processed")
        self.names.append(name)
        index = len(self.names)
        if (known := self._recorded.get(name)) is not None:
            if known.index != index:
                self.moved.append((name, known.index, index))
            self.taken.append(known)
            if known.error is not None:
                raise StepFailed(name, known.error, known.attempts)
            return known.result
        if self._recorder is None:
            raise StepNotRecorded(
                f"step {name!r} (step {index} of the item) has no recorded result"
            )
        with tracing.spans.step(name) if tracing.on else tracing.OFF:
            return await self._first(name, index, fn, args, kwargs, policy, self._recorder)

    async def _first(
        self,
        name: str,
        index: int,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        policy: StepRetry,
        recorder: StepRecorder,
    ) -> Any:
        attempts = 0
        error: str | None = None
        raised: Exception | None = None
        result: Any = None
        while True:
            attempts += 1
            try:
                if (fault := self._faults.get(name)) is not None:
                    raise fault
                result = _kept(name, await _call(fn, args, kwargs))
            except (StateNotSerializable, LimitExceeded) as exc:
                # The call was made (its effect is out there): what it
                # returned cannot be kept, so this is final, not retried.
                error, raised = f"{type(exc).__name__}: {exc}", exc
                break
            except Exception as exc:
                if attempts < policy.attempts:
                    await self._sleep(policy.delay(attempts))
                    continue
                error = f"{type(exc).__name__}: {exc}"
                break
            break
        record = StepRecorded(
            event_id=new_id("evt"),
            run_id=self._run_id,
            at=time.time(),
            dispatch_id=self._dispatch_id,
            name=name,
            index=index,
            result=None if error is not None else result,
            error=None if error is None else clip_text(error),
            attempts=attempts,
        )
        await recorder.record(record)
        self.taken.append(record)
        if raised is not None:
            raise raised
        if record.error is not None:
            raise StepFailed(name, record.error, attempts)
        return result
