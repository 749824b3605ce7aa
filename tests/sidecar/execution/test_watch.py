"""HandlerWatch: each call gets its whole timeout on one shared timer.

The handlers here sleep: how long a call runs is what is under test."""

from __future__ import annotations

from contextlib import closing

import anyio
import pytest

from sidecar.execution._watch import HandlerWatch
from tests.support import wait_for

pytestmark = pytest.mark.anyio

TIMEOUT = 0.5


@pytest.mark.slow  # waits out real timers
async def test_a_call_past_its_deadline_is_cancelled_and_named() -> None:
    began = anyio.current_time()
    with anyio.CancelScope() as scope, closing(HandlerWatch(scope, TIMEOUT)) as watch:
        watch.begin("m1")
        await anyio.sleep(TIMEOUT * 10)
        pytest.fail("the call ran past its deadline")
    assert scope.cancelled_caught
    assert watch.overran == "m1"
    assert anyio.current_time() - began >= TIMEOUT


@pytest.mark.slow  # waits out real timers
async def test_each_call_has_its_whole_timeout_though_the_timer_was_set_for_an_earlier_one() -> (
    None
):
    # The timer is armed for m1's deadline and fires while m2 runs: m2
    # started later, so it has time left and the timer moves to its deadline.
    with anyio.CancelScope() as scope, closing(HandlerWatch(scope, TIMEOUT)) as watch:
        for label in ("m1", "m2"):
            watch.begin(label)
            await anyio.sleep(TIMEOUT * 0.6)
            watch.end()
        # Between calls nothing is timed: the timer fires (at m2's deadline)
        # and is not set again.
        await wait_for(lambda: watch._timer is None, what="the timer to fire between calls")
        watch.begin("m3")
        await anyio.sleep(TIMEOUT * 10)
    assert scope.cancelled_caught
    assert watch.overran == "m3"


@pytest.mark.slow  # waits out real timers
async def test_leaving_the_watch_stops_its_timer() -> None:
    with anyio.CancelScope() as scope:
        with closing(HandlerWatch(scope, TIMEOUT)) as watch:
            watch.begin("m1")
        assert watch._timer is None
        # Nothing may happen: only time passing past m1's deadline shows it.
        await anyio.sleep(TIMEOUT * 2)
    assert not scope.cancelled_caught
    assert watch.overran is None
