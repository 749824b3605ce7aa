"""Counters and histograms in memory, printed as Prometheus text.

Kept in the hub process and reset by its restart, which Prometheus reads as
a counter reset (``rate()`` carries on). Label values are escaped; a
deployment's series go when the deployment is deleted (:meth:`forget`), so
the number of series follows the live deployments.
"""

from __future__ import annotations

import bisect
from collections import defaultdict


def label(key: str, value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{key}="{escaped}"'


def family(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> list[str]:
    """One family's lines: ``samples`` are (``{labels}`` or "", value)."""
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels} {value:g}" for labels, value in samples]
    return lines


class Counter:
    """A counter per value of one label (or one counter without it)."""

    def __init__(self, name: str, help_: str, key: str | None = None) -> None:
        self.name, self.help, self.key = name, help_, key
        self.values: defaultdict[str, float] = defaultdict(float)

    def inc(self, value: str = "", by: float = 1) -> None:
        self.values[value] += by

    def forget(self, value: str) -> None:
        self.values.pop(value, None)

    def render(self) -> list[str]:
        if self.key is None:
            return family(self.name, "counter", self.help, [("", self.values[""])])
        samples = [("{" + label(self.key, v) + "}", n) for v, n in sorted(self.values.items())]
        return family(self.name, "counter", self.help, samples)


LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
"""Seconds: from a millisecond (an accept's commit) to a minute (a backlog)."""


class Histogram:
    """A latency histogram (seconds), Prometheus' cumulative buckets."""

    def __init__(self, name: str, help_: str, buckets: tuple[float, ...] = LATENCY_BUCKETS):
        self.name, self.help, self.buckets = name, help_, buckets
        self.counts = [0] * (len(buckets) + 1)  # the last: above every bucket
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self.sum += seconds

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        total = 0
        for bound, count in zip(self.buckets, self.counts, strict=False):
            total += count
            lines.append(f'{self.name}_bucket{{le="{bound:g}"}} {total}')
        total += self.counts[-1]
        lines.append(f'{self.name}_bucket{{le="+Inf"}} {total}')
        lines += [f"{self.name}_sum {self.sum:g}", f"{self.name}_count {total}"]
        return lines
