"""A run's commands against a stub hub: `runs`, `run`, `approve`/`reject`,
`approvals`, `signal`, `resume`, `parked` and `retry`: what they send, print
and exit with."""

from __future__ import annotations

import json

from tests.hub.cli.stubhub import APR_A, DEP_A, DSP_A, RUN_A, Stub, cli


def test_runs_filters_by_deployment_and_prints_a_table(stub: Stub) -> None:
    run = {
        "id": RUN_A,
        "deployment_id": DEP_A,
        "parent_run_id": None,
        "is_top_level": True,
        "status": "running",
        "updated_at": 1767225600.0,
    }
    stub.routes["GET", "/runs?deployment=counter"] = (200, {"runs": [run]})
    result = cli(stub, "runs", "--deployment", "counter")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "DEPLOYMENT", "STATUS", "TOP-LEVEL", "UPDATED", "FAILING"]
    assert lines[1].split() == [RUN_A, DEP_A, "running", "yes", "2026-01-01", "00:00:00", "-"]


def test_run_shows_status_and_result(stub: Stub) -> None:
    run = {"id": RUN_A, "status": "completed", "result": {"count": 4}, "error": None}
    stub.routes["GET", f"/runs/{RUN_A}"] = (200, run)
    result = cli(stub, "run", RUN_A)
    assert result.exit_code == 0
    out = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert out == {"id": RUN_A, "status": "completed", "result": '{"count":4}', "error": "-"}


def test_run_shows_its_pending_timers(stub: Stub) -> None:
    timers = [
        {"name": "remind", "due_at": 1_800_000_000.0, "payload": None},
        {"name": "escalate", "due_at": 1_800_086_400.0, "payload": {"to": "boss"}},
    ]
    run = {"id": RUN_A, "status": "running", "timers": timers}
    stub.routes["GET", f"/runs/{RUN_A}"] = (200, run)
    result = cli(stub, "run", RUN_A)
    assert result.exit_code == 0
    out = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert out["timers"] == "remind at 2027-01-15 08:00:00, escalate at 2027-01-16 08:00:00"
    stub.routes["GET", f"/runs/{RUN_A}"] = (200, {**run, "timers": []})
    assert "timers" not in cli(stub, "run", RUN_A).stdout


def test_approve_approves_and_reject_rejects(stub: Stub) -> None:
    receipt = {"status": "accepted", "dispatch_id": DSP_A, "run_id": RUN_A, "deployment_id": DEP_A}
    stub.routes["POST", f"/approvals/{APR_A}"] = (202, receipt)
    assert cli(stub, "approve", APR_A).exit_code == 0
    result = cli(stub, "approve", APR_A, "--reject")
    assert result.exit_code == 0, result.output
    assert cli(stub, "approve", APR_A, "--decision", "reject").exit_code == 0  # the long way
    assert stub.requests == [
        ("POST", f"/approvals/{APR_A}", {"decision": "approve"}),
        ("POST", f"/approvals/{APR_A}", {"decision": "reject"}),
        ("POST", f"/approvals/{APR_A}", {"decision": "reject"}),
    ]
    out = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert (out["status"], out["dispatch_id"], out["run_id"]) == ("accepted", DSP_A, RUN_A)


def test_approve_refuses_an_unknown_or_contradictory_decision(stub: Stub) -> None:
    assert cli(stub, "approve", APR_A, "--decision", "maybe").exit_code == 2
    result = cli(stub, "approve", APR_A, "--reject", "--decision", "approve")
    assert result.exit_code == 2 and "contradicts" in result.output
    assert stub.requests == []


def test_approve_a_decided_approval_exits_1(stub: Stub) -> None:
    stub.routes["POST", f"/approvals/{APR_A}"] = (
        409,
        {"status": "rejected", "reason": "approval_decided", "detail": f"{APR_A} is decided"},
    )
    result = cli(stub, "approve", APR_A, "--reject")
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: approval_decided: {APR_A} is decided"


def test_approvals_filters_and_prints_a_table(stub: Stub) -> None:
    approval = {
        "id": APR_A,
        "run_id": RUN_A,
        "deployment_id": DEP_A,
        "prompt": "ship\n order 7?" + " x" * 60,
        "status": "pending",
        "decision": None,
        "created_at": 1767225600.0,
        "decided_at": None,
        "run_status": "waiting",
    }
    stub.routes["GET", f"/approvals?run={RUN_A}&status=pending"] = (
        200,
        {"approvals": [approval]},
    )
    result = cli(stub, "approvals", "--run", RUN_A, "--status", "pending")
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split() == [
        "ID", "RUN", "STATUS", "DECISION", "RUN-STATUS", "CREATED", "PROMPT",
    ]  # fmt: skip
    assert row.split()[:8] == [
        APR_A, RUN_A, "pending", "-", "waiting", "2026-01-01", "00:00:00", "ship",
    ]  # fmt: skip
    assert row.endswith("...") and len(row.split("00:00:00", 1)[1].strip()) == 60

    stub.routes["GET", "/approvals?deployment=counter"] = (200, {"approvals": []})
    result = cli(stub, "approvals", "--deployment", "counter", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == {"approvals": []}
    assert cli(stub, "approvals", "--status", "maybe").exit_code == 2


def test_signal_posts_the_name_and_the_json_payload(stub: Stub) -> None:
    receipt = {"status": "accepted", "dispatch_id": DSP_A, "run_id": RUN_A, "deployment_id": DEP_A}
    stub.routes["POST", f"/runs/{RUN_A}/signals"] = (202, receipt)
    result = cli(
        stub, "signal", RUN_A, "restock", "--payload", '{"qty": [3]}', "--message-id", "s1"
    )
    assert result.exit_code == 0, result.output
    out = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert (out["status"], out["dispatch_id"]) == ("accepted", DSP_A)
    assert cli(stub, "signal", RUN_A, "ping").exit_code == 0
    assert stub.requests == [
        (
            "POST",
            f"/runs/{RUN_A}/signals",
            {"name": "restock", "payload": {"qty": [3]}, "message_id": "s1"},
        ),
        ("POST", f"/runs/{RUN_A}/signals", {"name": "ping", "payload": None}),
    ]


def test_signal_refuses_a_payload_that_is_not_json(stub: Stub) -> None:
    result = cli(stub, "signal", RUN_A, "restock", "--payload", "{qty: 3}")
    assert result.exit_code == 2 and "--payload" in result.output
    assert stub.requests == []


def test_signal_to_an_ended_run_exits_1(stub: Stub) -> None:
    stub.routes["POST", f"/runs/{RUN_A}/signals"] = (
        409,
        {"status": "rejected", "reason": "workflow_run_terminal", "detail": "run is completed"},
    )
    result = cli(stub, "signal", RUN_A, "restock")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: workflow_run_terminal: run is completed"


def test_a_suspended_run_shows_its_failing_dispatch_and_is_resumed(stub: Stub) -> None:
    run = {"id": RUN_A, "deployment_id": DEP_A, "status": "suspended", "is_top_level": True,
           "failing_dispatch_id": DSP_A, "suspended_at": 1767225600.0,
           "error": "RuntimeError: boom", "updated_at": 1767225600.0}  # fmt: skip
    stub.routes["GET", "/runs"] = (200, {"runs": [run]})
    listed = cli(stub, "runs")
    assert listed.exit_code == 0, listed.output
    row = listed.stdout.splitlines()[1]
    assert "suspended" in row and f"{DSP_A}: RuntimeError: boom" in row
    stub.routes["GET", f"/runs/{RUN_A}"] = (200, run)
    shown = dict(line.split(None, 1) for line in cli(stub, "run", RUN_A).stdout.splitlines())
    assert (shown["status"], shown["failing_dispatch_id"]) == ("suspended", DSP_A)
    resumed = {**run, "status": "running", "failing_dispatch_id": None, "suspended_at": None,
               "error": None}  # fmt: skip
    stub.routes["POST", f"/runs/{RUN_A}/resume"] = (200, resumed)
    result = cli(stub, "resume", RUN_A)
    assert result.exit_code == 0, result.output
    assert stub.requests[-1] == ("POST", f"/runs/{RUN_A}/resume", None)
    out = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert out["status"] == "running" and "failing_dispatch_id" not in out
    stub.routes["POST", f"/runs/{RUN_A}/resume"] = (
        409, {"status": "rejected", "reason": "run_not_suspended", "detail": "it is running"},
    )  # fmt: skip
    again = cli(stub, "resume", RUN_A)
    assert again.exit_code == 1 and "run_not_suspended" in again.output


def test_parked_lists_and_retry_sends_a_parked_dispatch_again(stub: Stub) -> None:
    parked = {"id": DSP_A, "deployment_id": DEP_A, "run_id": RUN_A, "seq": 2,
              "status": "parked", "subject": "hello", "error": "ValueError: bad"}  # fmt: skip
    stub.routes["GET", "/dispatches?status=parked&deployment=f"] = (200, {"dispatches": [parked]})
    result = cli(stub, "parked", "--deployment", "f")
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split() == ["ID", "DEPLOYMENT", "RUN", "SEQ", "STATUS", "SUBJECT", "ERROR"]
    assert row.split() == [DSP_A, DEP_A, RUN_A, "2", "parked", "hello", "ValueError:", "bad"]
    retried = {**parked, "seq": 9, "status": "reserved", "error": None}
    stub.routes["POST", f"/dispatches/{DSP_A}/retry"] = (202, retried)
    result = cli(stub, "retry", DSP_A)
    assert result.exit_code == 0, result.output
    assert stub.requests[-1] == ("POST", f"/dispatches/{DSP_A}/retry", None)
    assert result.stdout.splitlines()[1].split()[3:5] == ["9", "reserved"]
    stub.routes["POST", f"/dispatches/{DSP_A}/retry"] = (
        409, {"status": "rejected", "reason": "dispatch_not_parked", "detail": "reserved"},
    )  # fmt: skip
    again = cli(stub, "retry", DSP_A)
    assert again.exit_code == 1 and "dispatch_not_parked" in again.output
