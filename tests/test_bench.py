"""The benchmarks still run (tiny counts; the figures belong to bench/suite.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import REPO


def bench(script: str, *args: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    figures: dict[str, object] = json.loads(out.stdout)
    return figures


def test_the_reference_hand_off_moves_every_message() -> None:
    figures = bench("reference.py", "--messages", "300", "--in-flight", "8")
    assert figures["messages"] == 300
    assert isinstance(figures["per_s"], float) and figures["per_s"] > 0
    # Two rows a message on A, in fewer transactions than rows: grouped.
    rows = figures["rows_per_transaction_a"]
    assert isinstance(rows, float) and rows > 1


def test_the_e2e_bench_spreads_an_open_loop_over_deployments() -> None:
    figures = bench("bench_e2e.py", "--mails", "40", "--deployments", "2", "--rate", "200")
    assert (figures["mails"], figures["deployments"], figures["offered_per_s"]) == (40, 2, 200)
    assert figures["up_exit_code"] == 0
    cpu = figures["cpu_ms_per_mail"]
    assert isinstance(cpu, dict) and cpu["hub"] > 0 and cpu["sidecar"] > 0
