"""Every sleep in tests/ is one the audit kept (docs/testing.md, "Waiting").

A test waits for a state (``tests.support.wait_for``, an event), never for
time. The sleeps that stay are part of what a test does (a poll's pause, a
handler slow on purpose, a fault's duration, a window in which something
must not happen); each file may hold as many as docs/testing.md's table
gives it rows for, and a new one fails here until it is either a wait
for a state or a row of that table, with its kind and its reason.

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

TABLE = REPO / "docs" / "testing.md"
ROW = re.compile(r"^\| ([\w/.]+\.py):(\d+(?:, \d+)*) \| (poll|workload|fault|window) \|", re.M)


def kept() -> dict[str, int]:
    """The sleeps each file may hold: docs/testing.md's table, a row's lines
    counted (a row names a file from tests/; its lines are the audit's and
    may drift as the file changes, the count may not)."""
    counts: dict[str, int] = {}
    for path, lines, _kind in ROW.findall(TABLE.read_text()):
        key = f"tests/{path}"
        counts[key] = counts.get(key, 0) + len(lines.split(", "))
    return counts


def sleeps(source: str) -> list[int]:
    """The lines of ``source`` that call a sleep, once a call, comments left out."""
    found = sorted(m.start() for pattern in (SLEEP, BARE) for m in pattern.finditer(source))
    if not found:
        return []  # most files: no need to read their comments
    comments = [
        (tok.start, tok.end)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    ends = [0]
    for line in io.StringIO(source).readlines():  # as tokenize counts lines
        ends.append(ends[-1] + len(line))
    spans = [(ends[a[0] - 1] + a[1], ends[b[0] - 1] + b[1]) for a, b in comments]
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
    lines, allowed = found(), kept()
    more = {f: at for f, at in lines.items() if len(at) > allowed.get(f, 0)}
    assert not more, (
        "sleeps the audit did not keep (file: lines); wait for a state instead"
        " (tests.support.wait_for), or, if the sleep is the behaviour under test,"
        f" give it a row in docs/testing.md's table: {more}"
    )
    fewer = {f: (len(lines.get(f, [])), n) for f, n in allowed.items() if len(lines.get(f, [])) < n}
    assert not fewer, (
        f"docs/testing.md's table keeps sleeps that are gone (file: found, kept): {fewer}"
    )


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
