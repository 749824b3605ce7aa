"""``MAILRUN_BACKOFF_SCALE``: the knob that runs long outages in compressed time.

Every retry delay of a process is scaled, none skipped: the attempts a retry
loop makes in a compressed outage are those it would make in the real one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from runtime import sidecar_env
from runtime.testing import BACKOFF_SCALE_ENV
from tests.support import REPO

DELAYS = (
    "import json, runtime; b = runtime.Backoff(0.05, 1.0, jitter=False);"
    " print(json.dumps([b.delay(1), b.delay(5), b.delay(10_000)]))"
)


def delays(scale: str | None) -> tuple[list[float], str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    if scale is not None:
        env[BACKOFF_SCALE_ENV] = scale
    done = subprocess.run(
        [sys.executable, "-c", DELAYS], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout), done.stderr


def test_every_delay_is_scaled_and_the_process_says_so() -> None:
    assert delays(None) == ([0.05, 0.8, 1.0], "")
    scaled, said = delays("0.025")
    assert scaled == [0.05 * 0.025, 0.8 * 0.025, 1.0 * 0.025]
    assert said.splitlines() == [
        f"{BACKOFF_SCALE_ENV}=0.025: every retry delay is scaled (a test setting)"
    ]


def test_a_value_that_would_stop_or_slow_down_retries_is_ignored_with_one_line() -> None:
    for bad in ("0", "2", "fast"):
        unscaled, said = delays(bad)
        assert unscaled == [0.05, 0.8, 1.0], bad
        assert said.splitlines() == [
            f"ignoring {BACKOFF_SCALE_ENV}={bad!r}: expected a number above 0, at most 1"
        ]


def test_a_sidecar_keeps_it_in_its_stripped_environment(tmp_path: Path) -> None:
    env = sidecar_env({BACKOFF_SCALE_ENV: "0.025", "SECRET": "s"}, home=tmp_path)
    assert env == {BACKOFF_SCALE_ENV: "0.025", "HOME": str(tmp_path)}
