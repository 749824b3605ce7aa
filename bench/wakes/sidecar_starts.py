"""How long sidecars took from their first start to their first Welcome, read
from the state dirs `mailrun up` left (a run of the whole-system tests, say):
the figures `--sidecar-join-timeout`'s default is chosen from
(docs/operations.md, "A sidecar's start bound").

A sidecar's log, ``D/logs/sidecar-<dep>.log``, is created by `up` as it
spawns (or asks the fork server for) the deployment's first sidecar: its
birth time is that start. The first ``session ses_...`` line the sidecar
logs is its Welcome. A first process that never joined (killed, crashed,
held on purpose by a test) makes the figure its successor's: the figures
are an upper bound of a start's, and the slowest are named.

    python bench/wakes/sidecar_starts.py /tmp/pytest-of-root    # any roots
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
from pathlib import Path

STAMP = "%Y-%m-%d %H:%M:%S,%f"


def birth(path: Path) -> float | None:
    """The file's birth time (statx; Python's stat has none on Linux before 3.12)."""
    done = subprocess.run(["stat", "-c", "%.9W", str(path)], capture_output=True, text=True)
    try:
        seconds = float(done.stdout)
    except ValueError:  # "?": the file system keeps none
        return None
    return seconds if done.returncode == 0 and seconds > 0 else None


def welcomed(path: Path) -> float | None:
    """When the log's first session line was written (its local time stamp)."""
    with path.open(errors="replace") as log:
        for line in log:
            if "mailrun.sidecar.link: session ses_" in line:
                stamp = " ".join(line.split()[:2])
                try:
                    return datetime.datetime.strptime(stamp, STAMP).timestamp()
                except ValueError:
                    return None
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--slowest", type=int, default=5)
    args = parser.parse_args()
    took: list[tuple[float, Path]] = []
    never = 0
    # pytest's ``*current`` links name a test's dir twice: each log once.
    logs = {log.resolve() for root in args.roots for log in root.glob("**/logs/sidecar-*.log")}
    for log in sorted(logs):
        started, joined = birth(log), welcomed(log)
        if started is None:
            continue
        if joined is None:
            never += 1
            continue
        took.append((joined - started, log))
    if not took:
        print("no sidecar log with a session found")
        return
    seconds = sorted(t for t, _ in took)
    q = statistics.quantiles(seconds, n=100) if len(seconds) > 1 else seconds * 99
    print(
        f"first starts: {len(seconds)} welcomed, {never} never;"
        f" seconds to the first Welcome: median {statistics.median(seconds):.2f},"
        f" p90 {q[89]:.2f}, p99 {q[98]:.2f}, max {seconds[-1]:.2f}"
    )
    for t, log in sorted(took, reverse=True)[: args.slowest]:
        print(f"  {t:7.2f} s  {log}")


if __name__ == "__main__":
    main()
