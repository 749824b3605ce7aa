"""Every sleep in tests/ is one the audit kept (docs/testing.md, "Waiting").

A test waits for a state (``tests.support.wait_for``, an event), never for
time. The sleeps that stay are part of what a test does (a poll's pause, a
handler slow on purpose, a fault's duration, a window in which something
must not happen); each file may hold as many as the audit counted there,
and a new one fails here until it is either a wait for a state or entered
below and in docs/testing.md's table with its reason.

A sleep is a call of ``time.sleep``, ``anyio.sleep`` or ``asyncio.sleep``
in code or in the source text a test hands to a handler, a script or a
subprocess (it runs all the same); a failpoint's ``sleep(ms)`` action is
a fault, named in the spec, not matched.
"""

from __future__ import annotations

import bisect
import io
import re
import tokenize
from pathlib import Path

from tests.support import REPO

TESTS = REPO / "tests"

SLEEP = re.compile(r"(?:\b|(?<=\\[nt]))(?:time|anyio|asyncio|trio)\s*\.\s*sleep\s*\(")
BARE = re.compile(r"\bfrom\s+(?:time|anyio|asyncio|trio)\s+import\b[^\n]*\bsleep\b")

KEPT: dict[str, int] = {
    "tests/conftest.py": 1,
    "tests/e2e/harness.py": 1,
    "tests/e2e/storage.py": 1,
    "tests/e2e/test_failure_policy.py": 1,
    "tests/e2e/test_hubs.py": 1,
    "tests/e2e/test_ownership.py": 1,
    "tests/e2e/test_scale_to_zero.py": 2,
    "tests/e2e/test_versions.py": 2,
    "tests/faults/asleep.py": 1,
    "tests/faults/cluster.py": 2,
    "tests/faults/proxy.py": 1,
    "tests/faults/rounds.py": 2,
    "tests/faults/scenarios.py": 11,
    "tests/faults/workload.py": 2,
    "tests/hub/api/test_server.py": 2,
    "tests/hub/clock/test_timer_loop.py": 2,
    "tests/hub/up/test_fleet.py": 6,
    "tests/hub/up/test_up.py": 7,
    "tests/legacy/make_release2_state.py": 2,
    "tests/runtime/test_database.py": 2,
    "tests/runtime/test_transport_nats.py": 1,
    "tests/sidecar/test_app.py": 4,
    "tests/sidecar/test_concurrency.py": 2,
    "tests/sidecar/test_control.py": 1,
    "tests/sidecar/test_policies.py": 2,
    "tests/sidecar/test_upgrade.py": 1,
    "tests/sidecar/test_watch.py": 4,
    "tests/support/nats.py": 3,
    "tests/support/test_nats.py": 1,
    "tests/support/waiting.py": 1,
}
"""Sleeps a file may hold, by path from the checkout (docs/testing.md has
each one's line, kind and reason)."""


def sleeps(source: str) -> list[int]:
    """The lines of ``source`` that call a sleep, once a call, comments left out."""
    comments = [
        (tok.start, tok.end)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    ends = [0]
    for line in source.splitlines(keepends=True):
        ends.append(ends[-1] + len(line))
    spans = [(ends[a[0] - 1] + a[1], ends[b[0] - 1] + b[1]) for a, b in comments]
    found = sorted(m.start() for pattern in (SLEEP, BARE) for m in pattern.finditer(source))
    return [
        bisect.bisect_right(ends, at) for at in found if not any(lo <= at < hi for lo, hi in spans)
    ]


def found() -> dict[str, list[int]]:
    """The lines of each file in tests/ that call a sleep (this one's examples aside)."""
    lines = {}
    for path in sorted(TESTS.rglob("*.py")):
        if path != Path(__file__):
            at = sleeps(path.read_text())
            if at:
                lines[str(path.relative_to(REPO))] = at
    return lines


def test_every_sleep_in_tests_is_one_the_audit_kept() -> None:
    lines = found()
    more = {f: at for f, at in lines.items() if len(at) > KEPT.get(f, 0)}
    assert not more, (
        "sleeps the audit did not keep (file: lines); wait for a state instead"
        " (tests.support.wait_for), or, if the sleep is the behaviour under test,"
        f" count it in KEPT and docs/testing.md's table: {more}"
    )
    fewer = {f: (len(lines.get(f, [])), n) for f, n in KEPT.items() if len(lines.get(f, [])) < n}
    assert not fewer, f"KEPT allows more sleeps than there are (file: found, kept): {fewer}"


def test_a_sleep_is_found_in_code_and_in_source_text_but_not_in_a_comment() -> None:
    source = (
        "import time\n"
        "from anyio import sleep\n"
        "await anyio.sleep(0.1)\n"
        "SRC = 'import time\\ntime.sleep(1)'\n"
        "x = 1  # not anyio.sleep(5): a comment\n"
        "failpoints = 'hub.accept=sleep(5)'\n"
        "await fall_asleep(car)\n"
    )
    assert sleeps(source) == [2, 3, 4]
