"""Whether ``ctx.step`` can record in a real run actor yet: until the run
actor hands each ``Context`` a recorder (steps made durable in the inbox),
a step raises StepNotRecorded there, and the tests that take one wait."""

from __future__ import annotations

import inspect

import pytest

from sidecar.execution import _run_actor


def steps_are_durable() -> bool:
    return "recorder=" in inspect.getsource(_run_actor)


needs_durable_steps = pytest.mark.skipif(
    not steps_are_durable(),
    reason="ctx.step records nothing in a run actor until steps are made durable there",
)
