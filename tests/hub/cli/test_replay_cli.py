"""`mailrun replay` against a stub hub: what it sends, how it renders the
report, and its exit status, which is the answer (0 same, 1 differs, 2 error)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.hub.cli.stubhub import DSP_A, RUN_A, Stub, cli
from tests.support import free_port

PATH = f"/runs/{RUN_A}/replay"


def report(**extra: Any) -> dict[str, Any]:
    return {
        "run_id": RUN_A,
        "differs": False,
        "replayed": 4,
        "start": "beginning",
        "first_step": 1,
        "last_step": 4,
        "skipped": [],
        "difference": None,
        **extra,
    }


def test_no_difference_exits_0_and_a_difference_exits_1(stub: Stub, tmp_path: Path) -> None:
    new = tmp_path / "new.py"
    new.write_text("async def main(ctx, item):\n    pass\n")
    stub.routes["POST", PATH] = (200, report())
    same = cli(stub, "replay", RUN_A, "--file", str(new), "--entrypoint", "flow:main")
    assert same.exit_code == 0, same.output
    assert stub.requests[-1] == (
        "POST",
        PATH,
        {"source": new.read_text(), "entrypoint": "flow:main"},
    )
    assert f"run {RUN_A}: 4 item(s) replayed (steps 1-4), starting at the beginning" in same.output
    assert "no difference" in same.output

    difference = {
        "step": 3,
        "seq": 3,
        "dispatch_id": DSP_A,
        "kind": "mail",
        "what": "state",
        "recorded": {"state": {"count": 3}},
        "replayed": {"state": {"count": 3, "last": "three"}},
    }
    stub.routes["POST", PATH] = (
        200,
        report(differs=True, replayed=3, last_step=3, difference=difference),
    )
    differs = cli(stub, "replay", RUN_A, "--file", str(new))
    assert differs.exit_code == 1, differs.output
    assert stub.requests[-1][2] == {"source": new.read_text()}  # the run's own entrypoint
    lines = differs.output.splitlines()
    assert f"first difference at step 3 (seq 3, mail {DSP_A}): state" in lines
    assert "  changed keys: last" in lines
    assert '  recorded: {"state":{"count":3}}' in lines
    assert '  replayed: {"state":{"count":3,"last":"three"}}' in lines
    as_json = cli(stub, "replay", RUN_A, "--file", str(new), "--json")
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)["difference"] == difference


def test_every_error_exits_2(stub: Stub, tmp_path: Path) -> None:
    new = tmp_path / "new.py"
    new.write_text("async def main(ctx, item)\n")
    refusal = {"status": "error", "reason": "replay_failed", "detail": "load_failed: SyntaxError"}
    stub.routes["POST", PATH] = (422, refusal)
    refused = cli(stub, "replay", RUN_A, "--file", str(new))
    assert refused.exit_code == 2
    assert "error: replay_failed: load_failed: SyntaxError" in refused.stderr
    as_json = cli(stub, "replay", RUN_A, "--file", str(new), "--json")
    assert as_json.exit_code == 2 and json.loads(as_json.stdout) == refusal
    missing = cli(stub, "replay", RUN_A, "--file", str(tmp_path / "nope.py"))
    assert missing.exit_code == 2 and "cannot read" in missing.stderr
    nobody = cli(
        None, "replay", RUN_A, "--file", str(new), "--hub", f"http://127.0.0.1:{free_port()}"
    )
    assert nobody.exit_code == 2 and "hub_unreachable" in nobody.stderr
