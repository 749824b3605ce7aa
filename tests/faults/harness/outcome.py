"""What a fault round comes to: its :class:`Outcome` (the checker's result,
the fault's own findings, whether it was injected at all) and its
:class:`Phases`, where its time went (a slow or failed round says which part
of it was slow)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from .checker import CheckResult
from .workload import History


@dataclass
class Phases:
    """Where a round's time went: seconds spent in each phase, in order (a
    slow round, or a failed one, says which part of it was slow)."""

    spent: list[tuple[str, float]] = field(default_factory=list)
    _since: float = field(default_factory=time.monotonic)

    def mark(self, phase: str) -> None:
        """``phase`` ended now: it took the time since the previous mark."""
        now = time.monotonic()
        self.spent.append((phase, now - self._since))
        self._since = now

    def summary(self) -> str:
        return "phases " + " ".join(f"{name}={took:.2f}s" for name, took in self.spent)


Verdict = Literal["ok", "failed", "not injected"]


@dataclass
class Outcome:
    fault: str
    deployment_id: str
    result: CheckResult
    recovery: float | None
    """Seconds from the fault's end until every dispatch accepted by then was
    processed; None: not within the liveness bound."""
    duration: float
    problems: list[str]
    """What the system did wrong beyond the checker (the fault's own checks)."""
    not_injected: list[str]
    """Why the fault could not be injected (a harness problem)."""
    history: History
    said: list[str] = field(default_factory=list)
    """Figures ``inject`` reported (``Round.say``)."""
    phases: Phases = field(default_factory=Phases)

    @property
    def ok(self) -> bool:
        return self.result.ok and not self.problems

    @property
    def injected(self) -> bool:
        return not self.not_injected

    @property
    def verdict(self) -> Verdict:
        """A failure of the system counts whether the fault was injected or
        not; a round that was safe and live but injected nothing tested nothing."""
        if not self.ok:
            return "failed"
        return "ok" if self.injected else "not injected"

    def summary(self) -> str:
        took = "-" if self.recovery is None else f"{self.recovery:.2f}s"
        text = f"{self.fault} {self.result.summary()} recovery={took}"
        parts = [text, *self.said, *self.problems, *self.not_injected]
        return "; ".join([*parts, self.phases.summary()] if self.phases.spent else parts)
