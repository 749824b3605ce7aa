"""Failpoints: parsing, each action, hit counts, zero config."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from runtime import FailpointError, afailpoint, failpoint
from runtime.testing import CRASH_EXIT_CODE, configure_failpoints, failpoint_spent
from tests.support import REPO


@pytest.fixture(autouse=True)
def _reset() -> object:
    yield
    configure_failpoints("")


def test_unset_failpoints_do_nothing() -> None:
    configure_failpoints("")
    failpoint("anything")


@pytest.mark.parametrize(
    "spec", ["x", "x=explode", "x=sleep", "x=sleep(abc)", "x=pause", "=crash", "x=crash(1"]
)
def test_malformed_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        configure_failpoints(spec)


def test_raise_fires_only_the_given_number_of_times() -> None:
    configure_failpoints("a.b=2*raise; other=sleep(1)")
    for _ in range(2):
        assert not failpoint_spent("a.b")
        with pytest.raises(FailpointError, match=r"a\.b"):
            failpoint("a.b")
    assert failpoint_spent("a.b") and not failpoint_spent("not.configured")
    failpoint("a.b")
    failpoint("not.configured")


def test_sleep_blocks_for_the_given_milliseconds() -> None:
    configure_failpoints("s=sleep(30)")
    began = time.monotonic()
    failpoint("s")
    assert time.monotonic() - began >= 0.03


@pytest.mark.anyio
async def test_pause_waits_for_its_file(tmp_path: Path) -> None:
    gate = tmp_path / "go"
    configure_failpoints(f"p=pause({gate})")
    passed = anyio.Event()

    async def hit() -> None:
        await afailpoint("p")
        passed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(hit)
        with anyio.move_on_after(0.05):
            await passed.wait()
        assert not passed.is_set()
        assert not failpoint_spent("p"), "fires on every hit: never spent"
        gate.touch()
        with anyio.fail_after(5):
            await passed.wait()


def test_crash_exits_the_process_at_once() -> None:
    code = "from runtime import failpoint; failpoint('boom'); print('survived')"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={"MAILRUN_FAILPOINTS": "boom=crash", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert proc.returncode == CRASH_EXIT_CODE
    assert "survived" not in proc.stdout
    assert "failpoint boom: crash" in proc.stderr
