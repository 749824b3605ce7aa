"""bench/mail/tracing.py still runs (tiny counts): the spans of the "on" rounds
reach its sink, and the hooks' figures come out for both sides."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import REPO

pytestmark = pytest.mark.slow


def _run(*args: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "mail" / "tracing.py"), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    figures: dict[str, object] = json.loads(out.stdout)
    return figures


def test_the_on_rounds_export_to_the_sink() -> None:
    # Every mail sampled: with the default ratio, 20 mails would most likely export nothing.
    figures = _run("--mails", "20", "--senders", "4", "--rounds", "1", "--sample", "1")
    assert isinstance(figures["sink_requests"], int) and figures["sink_requests"] > 0
    for way in ("off", "on"):
        part = figures[way]
        assert isinstance(part, dict) and part["accepted_per_s"] > 0
    assert figures["sample"] == "1"
    ratios = figures["on_over_off_each_round"]
    assert isinstance(ratios, list) and len(ratios) == 1
    median = figures["on_over_off_median"]
    assert isinstance(median, float) and round(median, 3) == ratios[0]


def test_the_hooks_are_priced_on_both_sides() -> None:
    figures = _run("--hooks", "--mails", "300")
    assert figures["mails"] == 300
    assert isinstance(figures["hub_us_per_mail"], float) and figures["hub_us_per_mail"] > 0
    assert isinstance(figures["sidecar_us_per_mail"], float) and figures["sidecar_us_per_mail"] > 0
