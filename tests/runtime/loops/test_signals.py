"""cancel_on_signals: SIGTERM/SIGINT end the block, in order when asked to."""

from __future__ import annotations

import os
import signal

import anyio
import anyio.lowlevel
import pytest

from runtime import cancel_on_signals

pytestmark = pytest.mark.anyio


def _send(signum: signal.Signals) -> None:
    os.kill(os.getpid(), signum)


async def test_a_signal_cancels_the_block_and_is_reported() -> None:
    reached_end = False
    with anyio.fail_after(5):
        async with cancel_on_signals() as received:
            _send(signal.SIGTERM)
            await anyio.sleep_forever()
            reached_end = True
    assert received == [signal.SIGTERM]
    assert not reached_end


async def test_with_graceful_the_first_signal_asks_and_the_second_cancels() -> None:
    asked = anyio.Event()
    with anyio.fail_after(5):
        async with cancel_on_signals(graceful=asked.set) as received:
            _send(signal.SIGINT)
            await asked.wait()
            assert received == [signal.SIGINT]  # still running: a stop was only asked for
            _send(signal.SIGTERM)
            await anyio.sleep_forever()
    assert asked.is_set()
    assert received == [signal.SIGINT, signal.SIGTERM]


async def test_a_block_that_ends_by_itself_restores_the_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    async with cancel_on_signals() as received:
        await anyio.lowlevel.checkpoint()
    assert received == []
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
