"""The `mailrun` CLI against a stub hub: argument parsing, requests, output, exit codes.

The stub is a real HTTP server on a loopback port that answers canned JSON and
records each request, so these tests prove what the CLI sends and how it
renders what it gets; the real hub is exercised in tests/hub/up/test_up.py and e2e.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from hub import HubSettings
from hub._client import AsyncHubClient
from hub._errors import HubResponseError, HubUnreachable
from hub.cli.main import main
from hub.outbound import STARTTLS_ENV
from hub.store import DATABASE_ENV
from runtime import NATS_URL_ENV, ProcessSettings
from runtime.config import (
    BACKOFF_MAX_ENV,
    DEFAULT_MAIL_DOMAIN,
    DEFAULT_REDELIVER_AFTER,
    DEFAULT_RUN_HISTORY,
    LOG_LEVEL_ENV,
    LOOP_ENV,
    REDELIVER_AFTER_ENV,
    RUN_HISTORY_ENV,
    SQLITE_SYNCHRONOUS_ENV,
)
from tests.support.launch.starts import HUB_START_TIMEOUT, started

DEP_A = "dep_" + "a" * 26
DEP_B = "dep_" + "b" * 26
RUN_A = "run_" + "1" * 26
DSP_A = "dsp_" + "2" * 26
APR_A = "apr_" + "3" * 26


@dataclass
class Stub:
    url: str
    routes: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    authorization: list[str | None] = field(default_factory=list)


@pytest.fixture
def stub() -> Iterator[Stub]:
    state = Stub(url="")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            state.requests.append((self.command, self.path, json.loads(raw) if raw else None))
            state.authorization.append(self.headers.get("Authorization"))
            code, body = state.routes.get(
                (self.command, self.path),
                (404, {"status": "error", "reason": "not_found", "detail": self.path}),
            )
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_PATCH = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def cli(stub: Stub | None, *args: str, **kwargs: Any) -> Any:
    hub = ["--hub", stub.url] if stub is not None else []
    return CliRunner().invoke(main, [*args, *hub], catch_exceptions=False, **kwargs)


def deployment(dep_id: str, name: str, status: str = "deployed", **extra: Any) -> dict[str, Any]:
    return {
        "id": dep_id,
        "name": name,
        "address": f"{name}@mailrun.local",
        "public_key": "pk",
        "status": status,
        "created_at": 1767225600.0,
        **extra,
    }


def test_deployments_prints_an_aligned_table(stub: Stub) -> None:
    stub.routes["GET", "/workflows/deployments"] = (
        200,
        {
            "deployments": [
                deployment(
                    DEP_A,
                    "counter",
                    connected=True,
                    pending=2,
                    oldest_wait=12.34,
                    pending_dispatches=3,
                    stuck=2,
                    quarantined=1,
                ),
                deployment(DEP_B, "a-much-longer-name", status="deleted"),
            ]
        },
    )
    result = cli(stub, "deployments")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "NAME",
        "ID",
        "STATUS",
        "ADDRESS",
        "CONNECTED",
        "PENDING",
        "OLDEST-WAIT",
        "UNPROCESSED",
        "STUCK",
        "QUARANTINED",
    ]
    assert lines[1].split() == [
        "counter",
        DEP_A,
        "deployed",
        "counter@mailrun.local",
        "yes",
        "2",
        "12.3s",
        "3",
        "2",
        "1",
    ]
    assert lines[2].split()[:3] == ["a-much-longer-name", DEP_B, "deleted"]
    # Every column starts at the same offset on every line.
    for header in ("ID", "STATUS", "ADDRESS"):
        col = lines[0].index(header)
        assert lines[1][col - 2 : col] == "  " and lines[1][col] != " "
        assert lines[2][col - 2 : col] == "  " and lines[2][col] != " "


def test_json_prints_the_hubs_json_as_is(stub: Stub) -> None:
    payload = {"deployments": [deployment(DEP_A, "counter", extra_field={"kept": [1, 2]})]}
    stub.routes["GET", "/workflows/deployments"] = (200, payload)
    result = cli(stub, "deployments", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == payload


def test_a_hub_error_prints_reason_and_detail_and_exits_1(stub: Stub) -> None:
    stub.routes["POST", "/mail"] = (
        409,
        {"status": "rejected", "reason": "workflow_run_terminal", "detail": "run is completed"},
    )
    result = cli(stub, "send", "counter@mailrun.local", "--subject", "late")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: workflow_run_terminal: run is completed"
    assert result.stdout == ""


def test_a_hub_error_with_json_prints_the_error_body(stub: Stub) -> None:
    body = {"status": "rejected", "reason": "unknown_address", "detail": "nobody@x"}
    stub.routes["POST", "/mail"] = (404, body)
    result = cli(stub, "send", "nobody@x", "--subject", "s", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == body


def test_a_non_json_error_page_still_reports_the_status(stub: Stub) -> None:
    stub.routes["GET", f"/runs/{RUN_A}"] = (502, b"<html>bad gateway</html>")
    result = cli(stub, "run", RUN_A)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: http_502: <html>bad gateway</html>")


def test_an_unreachable_hub_exits_2_with_a_clear_message() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connections are refused
        result = CliRunner().invoke(main, ["deployments", "--hub", f"http://127.0.0.1:{port}"])
    assert result.exit_code == 2
    assert "cannot reach the hub at" in result.stderr
    assert "mailrun up" in result.stderr


def test_the_hub_url_comes_from_the_environment(stub: Stub) -> None:
    stub.routes["GET", "/runs"] = (200, {"runs": []})
    result = CliRunner().invoke(main, ["runs"], env={"MAILRUN_HUB": stub.url})
    assert result.exit_code == 0, result.output
    assert stub.requests == [("GET", "/runs", None)]


def test_deploy_sends_the_source_and_prints_the_join_token_when_asked(
    stub: Stub, tmp_path: Path
) -> None:
    source = "async def main(ctx, item):\n    pass\n"
    flow = tmp_path / "counter.py"
    flow.write_text(source)
    stub.routes["POST", "/workflows/deployments"] = (
        201,
        deployment(DEP_A, "counter", join_token="tok-123", entrypoint="counter:main"),
    )
    args = ["deploy", str(flow), "--name", "counter", "--entrypoint", "counter:main"]
    result = cli(stub, *args, "--join-token")
    assert result.exit_code == 0, result.output
    assert stub.requests == [
        (
            "POST",
            "/workflows/deployments",
            {"name": "counter", "source": source, "entrypoint": "counter:main"},
        )
    ]
    assert DEP_A in result.stdout
    assert "counter@mailrun.local" in result.stdout
    assert "join token  tok-123" in result.stdout


@pytest.mark.parametrize("as_json", [False, True])
def test_deploy_keeps_the_join_token_to_itself_unless_asked(
    stub: Stub, tmp_path: Path, as_json: bool
) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text("x = 1\n")
    stub.routes["POST", "/workflows/deployments"] = (
        201,
        deployment(DEP_A, "f", join_token="tok-123"),
    )
    result = cli(stub, "deploy", str(flow), "--name", "f", *(["--json"] if as_json else []))
    assert result.exit_code == 0, result.output
    assert DEP_A in result.stdout
    assert "tok-123" not in result.output


def test_deploy_without_entrypoint_leaves_the_hubs_default(stub: Stub, tmp_path: Path) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text("x = 1\n")
    stub.routes["POST", "/workflows/deployments"] = (201, deployment(DEP_A, "f"))
    assert cli(stub, "deploy", str(flow), "--name", "f").exit_code == 0
    assert "entrypoint" not in stub.requests[0][2]


def test_deploy_names_the_domain_it_is_made_in(stub: Stub, tmp_path: Path) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text("x = 1\n")
    stub.routes["POST", "/workflows/deployments"] = (201, deployment(DEP_A, "f"))
    assert cli(stub, "deploy", str(flow), "--name", "f", "--domain", "example.org").exit_code == 0
    assert stub.requests[0][2]["domain"] == "example.org"
    update = cli(stub, "deploy", str(flow), "--name", "f", "--domain", "x.org", "--update")
    assert update.exit_code == 1 and "--update" in update.output
    assert len(stub.requests) == 1


def test_deploy_of_a_missing_file_is_a_usage_error(stub: Stub, tmp_path: Path) -> None:
    result = cli(stub, "deploy", str(tmp_path / "nope.py"), "--name", "x")
    assert result.exit_code == 2
    assert stub.requests == []


def test_send_prints_the_receipt(stub: Stub) -> None:
    receipt = {"status": "accepted", "dispatch_id": DSP_A, "run_id": RUN_A, "deployment_id": DEP_A}
    stub.routes["POST", "/mail"] = (202, receipt)
    result = cli(
        stub,
        "send",
        "counter@mailrun.local",
        "--subject",
        "hi",
        "--body",
        "hello there",
        "--message-id",
        "m-1",
        "--from",
        "ann@example.com",
    )
    assert result.exit_code == 0, result.output
    assert stub.requests[0][2] == {
        "to": "counter@mailrun.local",
        "subject": "hi",
        "body": "hello there",
        "message_id": "m-1",
        "from": "ann@example.com",
    }
    out = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert out == {
        "status": "accepted",
        "dispatch_id": DSP_A,
        "run_id": RUN_A,
        "deployment_id": DEP_A,
    }


def test_send_a_binary_body_file_goes_as_base64(stub: Stub, tmp_path: Path) -> None:
    data = bytes(range(256))
    (tmp_path / "body.bin").write_bytes(data)
    stub.routes["POST", "/mail"] = (202, {"status": "accepted"})
    result = cli(stub, "send", "a@b", "--subject", "s", "--body-file", str(tmp_path / "body.bin"))
    assert result.exit_code == 0, result.output
    sent = stub.requests[0][2]
    assert "body" not in sent
    assert base64.b64decode(sent["body_b64"]) == data


def test_send_refuses_both_body_options(stub: Stub, tmp_path: Path) -> None:
    (tmp_path / "b").write_text("x")
    result = cli(
        stub, "send", "a@b", "--subject", "s", "--body", "y", "--body-file", str(tmp_path / "b")
    )
    assert result.exit_code == 2
    assert "not both" in result.output
    assert stub.requests == []


def test_send_needs_a_subject(stub: Stub) -> None:
    result = cli(stub, "send", "a@b")
    assert result.exit_code == 2
    assert "--subject" in result.output


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


def test_delete_passes_the_name_or_id_to_the_hub(stub: Stub) -> None:
    stub.routes["DELETE", "/workflows/deployments/counter"] = (
        200,
        deployment(DEP_A, "counter", status="deleted"),
    )
    result = cli(stub, "delete", "counter")
    assert result.exit_code == 0, result.output
    assert [r[:2] for r in stub.requests] == [("DELETE", "/workflows/deployments/counter")]
    out = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert (out["id"], out["status"]) == (DEP_A, "deleted")


def test_delete_of_an_unknown_deployment_exits_1(stub: Stub) -> None:
    stub.routes["DELETE", "/workflows/deployments/a%2Fb"] = (
        404,
        {"status": "error", "reason": "unknown_deployment", "detail": "no deployment 'a/b'"},
    )
    result = cli(stub, "delete", "a/b")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: unknown_deployment: no deployment 'a/b'"


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


def test_sidecar_execs_python_m_sidecar_with_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    calls: list[tuple[str, list[str]]] = []
    envs: list[dict[str, str]] = []

    def fake_execve(path: str, argv: list[str], env: dict[str, str]) -> None:
        calls.append((path, argv))
        envs.append(env)
        raise SystemExit(0)

    monkeypatch.setattr("os.execve", fake_execve)
    result = CliRunner().invoke(
        main,
        [
            "sidecar",
            "--state-dir",
            "/srv/s",
            "--deployment",
            DEP_A,
            "--nats",
            "nats://n:4222",
            "--takeover",
        ],
    )
    assert result.exit_code == 0, result.output
    assert calls == [
        (
            sys.executable,
            [
                sys.executable,
                "-m",
                "sidecar",
                "--state-dir",
                "/srv/s",
                "--deployment",
                DEP_A,
                "--takeover",
            ],
        )
    ]
    # The URL may carry a password: it travels in the environment, not argv.
    assert envs[0][NATS_URL_ENV] == "nats://n:4222"
    assert NATS_URL_ENV not in os.environ  # this process's own is left alone


def test_sidecar_join_passes_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_execve(path: str, argv: list[str], env: dict[str, str]) -> None:
        calls.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr("os.execve", fake_execve)
    result = CliRunner().invoke(main, ["sidecar", "--state-dir", "d", "--join", "tok"])
    assert result.exit_code == 0
    assert calls[0][3:] == ["--state-dir", "d", "--join", "tok"]


def test_sidecar_needs_a_state_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.execve", lambda *a: pytest.fail("must not exec"))
    result = CliRunner().invoke(main, ["sidecar"])
    assert result.exit_code == 2
    assert "--state-dir" in result.output


@pytest.mark.parametrize("bad", ["8470", "localhost", "host:port", "h:0", "h:70000"])
def test_up_refuses_a_malformed_http_address(bad: str) -> None:
    result = CliRunner().invoke(main, ["up", "--http", bad])
    assert result.exit_code == 2
    assert "HOST:PORT" in result.output


@pytest.mark.parametrize("command", ["up", "hub"])
@pytest.mark.parametrize("bad", ["25", "relay", "relay:0", "relay:smtp"])
def test_a_malformed_smtp_relay_address_is_a_usage_error(command: str, bad: str) -> None:
    extra = ["--state-dir", "d"] if command == "hub" else []
    result = CliRunner().invoke(main, [command, *extra, "--smtp-relay", bad])
    assert result.exit_code == 2
    assert "HOST:PORT" in result.output


def test_outbox_filters_and_prints_a_table(stub: Stub) -> None:
    mail = {
        "id": "out_1",
        "to": "someone@example.org",
        "subject": "hello",
        "status": "pending",
        "in_doubt": True,
        "attempts": 3,
        "last_error": "127.0.0.1:2525: SMTPConnectError",
        "relay_answer": None,
    }
    stub.routes["GET", "/outbox?status=pending&deployment=counter"] = (200, {"outbox": [mail]})
    result = cli(stub, "outbox", "--status", "pending", "--deployment", "counter")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:5] == ["ID", "TO", "SUBJECT", "STATUS", "ATTEMPTS"]
    assert lines[1].split() == [
        "out_1", "someone@example.org", "hello", "pending", "(in", "doubt)", "3",
        "127.0.0.1:2525:", "SMTPConnectError",
    ]  # fmt: skip
    assert cli(stub, "outbox", "--status", "lost").exit_code == 2


def running_hubs(monkeypatch: pytest.MonkeyPatch) -> list[HubSettings]:
    """The settings each ``mailrun hub`` below would run a hub with (none runs)."""
    calls: list[HubSettings] = []
    monkeypatch.setattr("hub._server.run_hub", calls.append)
    return calls


def test_hub_runs_the_hub_in_process_with_the_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = running_hubs(monkeypatch)
    token_file = tmp_path / "mailrun-token"
    token_file.write_text("a-token-of-the-operators-0123\n")
    args = ["hub", "--state-dir", "/srv/hub", "--http", "0.0.0.0:9000", "--nats", "nats://n:4222"]
    args += ["--sidecar-root", "/srv/sc", "--subject-prefix", "mr", "--max-body", "1024"]
    args += ["--redeliver-after", "2.5", "--token-file", str(token_file)]
    args += ["--run-history", "4", "--smtp-relay", "mail.internal:587"]
    env = {BACKOFF_MAX_ENV: "0.25", LOOP_ENV: "asyncio", STARTTLS_ENV: "1"}
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    (settings,) = calls
    assert settings.state_dir == Path("/srv/hub")
    assert (settings.http_host, settings.http_port) == ("0.0.0.0", 9000)
    assert settings.nats_url == "nats://n:4222"
    assert settings.sidecar_root == Path("/srv/sc")
    assert (settings.subject_prefix, settings.domain) == ("mr", DEFAULT_MAIL_DOMAIN)
    assert settings.max_body == 1024
    assert settings.wire.dispatch.redeliver_after == 2.5
    assert settings.wire.retention.run_history == 4
    assert settings.admin_token == "a-token-of-the-operators-0123"
    assert settings.relay is not None and settings.relay.address == "mail.internal:587"
    assert settings.relay.starttls is True
    assert (settings.smtp, settings.database) == (None, None)
    # What the process reads from its environment, in the same object.
    assert settings.process == ProcessSettings(
        log_level="INFO", backend_options={}, backoff_max=0.25, sqlite_synchronous="FULL"
    )


def test_a_hub_setting_that_makes_no_sense_stops_it_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = running_hubs(monkeypatch)
    args = ["hub", "--state-dir", str(tmp_path / "state")]
    for env in (
        {LOG_LEVEL_ENV: "chatty"},
        {LOOP_ENV: "trio"},
        {BACKOFF_MAX_ENV: "0"},
        {SQLITE_SYNCHRONOUS_ENV: "OFF"},
    ):
        result = CliRunner().invoke(main, args, env=env)
        assert result.exit_code == 1, (env, result.output)
    result = CliRunner().invoke(main, [*args, "--token-file", str(tmp_path / "missing")])
    assert result.exit_code == 1
    assert calls == []  # no hub ran


def test_hub_and_up_take_a_postgresql_database_from_the_environment_or_refuse_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = running_hubs(monkeypatch)
    url = "postgresql://mailrun:secret@db.internal/mailrun"
    args = ["hub", "--state-dir", "/srv/hub"]
    result = CliRunner().invoke(main, args, env={DATABASE_ENV: url})
    assert result.exit_code == 0, result.output
    assert calls[-1].database == url
    for command in (args, ["up"]):
        result = CliRunner().invoke(main, [*command, "--database", "/srv/hub/other.db"])
        assert result.exit_code == 2 and "a postgresql:// URL" in result.output


def test_hub_takes_the_redelivery_bound_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `mailrun up` passes its environment to the hub it starts: this is how a
    # bound reaches a supervised hub.
    calls = running_hubs(monkeypatch)
    args = ["hub", "--state-dir", "/srv/hub"]
    result = CliRunner().invoke(main, args, env={REDELIVER_AFTER_ENV: "0.5"})
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, args, env={REDELIVER_AFTER_ENV: None})
    assert result.exit_code == 0, result.output
    bounds = [c.wire.dispatch.redeliver_after for c in calls]
    assert bounds == [0.5, DEFAULT_REDELIVER_AFTER]
    result = CliRunner().invoke(main, [*args, "--redeliver-after", "0"])
    assert result.exit_code == 2 and "not in the range x>0" in result.output


def test_hub_takes_the_run_history_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = running_hubs(monkeypatch)
    args = ["hub", "--state-dir", "/srv/hub"]
    for value in ("0", None):
        result = CliRunner().invoke(main, args, env={RUN_HISTORY_ENV: value})
        assert result.exit_code == 0, result.output
    assert [c.wire.retention.run_history for c in calls] == [0, DEFAULT_RUN_HISTORY]
    result = CliRunner().invoke(main, [*args, "--run-history", "-1"])
    assert result.exit_code == 2 and "not in the range x>=0" in result.output


def test_hub_lets_the_os_choose_port_0_where_up_refuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = running_hubs(monkeypatch)
    result = CliRunner().invoke(main, ["hub", "--state-dir", "/srv/hub", "--http", "[::1]:0"])
    assert result.exit_code == 0, result.output
    assert (calls[0].http_host, calls[0].http_port) == ("::1", 0)
    result = CliRunner().invoke(main, ["up", "--http", "[::1]:0"])
    assert result.exit_code == 2
    assert "HOST:PORT" in result.output


@pytest.mark.slow  # real `python -m hub` and `mailrun hub` processes
def test_python_m_hub_is_the_mailrun_hub_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hub", "--help"], capture_output=True, text=True, check=True
    )
    usage, _, direct = done.stdout.partition("\n")
    assert usage == "Usage: python -m hub [OPTIONS]"
    via_cli = CliRunner().invoke(main, ["hub", "--help"]).stdout.partition("\n")[2]
    assert direct.split() == via_cli.split()  # the same help, whatever the terminal's width


MAILRUN_COMMANDS = [
    "approvals",
    "approve",
    "cancel",
    "delete",
    "demo",
    "deploy",
    "deployments",
    "dkim-record",
    "hub",
    "migrate",
    "nats-config",
    "outbox",
    "parked",
    "pause",
    "producer",
    "replay",
    "resume",
    "retry",
    "rollback",
    "run",
    "runs",
    "schedule",
    "send",
    "sidecar",
    "signal",
    "unpause",
    "up",
    "versions",
    "watch",
]


def test_mailrun_lists_every_command_from_every_module() -> None:
    # The commands are defined in several modules and gathered by the group:
    # one left out of it would be missing from `mailrun` with nothing failing.
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    listing = result.stdout.partition("Commands:\n")[2]
    assert [line.split()[0] for line in listing.splitlines()] == MAILRUN_COMMANDS
    for name in MAILRUN_COMMANDS:  # each answers its own --help, under its own name
        usage = CliRunner().invoke(main, [name, "--help"]).stdout.partition("\n")[0]
        assert usage.startswith(f"Usage: main {name} ")


def test_the_console_script_is_the_group_of_every_command() -> None:
    import hub.cli

    # pyproject's `mailrun = "hub.cli:main"`, the package's name for this group
    assert hub.cli.main is main
    assert sorted(main.commands) == MAILRUN_COMMANDS


def test_the_async_client_answers_and_fails_like_the_sync_one(stub: Stub) -> None:
    stub.routes["GET", "/runs?deployment=a+b"] = (200, {"runs": []})
    stub.routes["DELETE", "/workflows/deployments/a%2Fb"] = (
        404,
        {"status": "error", "reason": "unknown_deployment", "detail": "no deployment 'a/b'"},
    )

    async def go() -> None:
        async with AsyncHubClient(stub.url) as client:
            assert await client.runs("a b") == {"runs": []}
            with pytest.raises(HubResponseError) as refused:
                await client.delete_deployment("a/b")
            assert (refused.value.http_status, refused.value.reason) == (404, "unknown_deployment")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            async with AsyncHubClient(f"http://127.0.0.1:{s.getsockname()[1]}") as client:
                with pytest.raises(HubUnreachable, match="cannot reach the hub at"):
                    await client.healthz()

    anyio.run(go)


TOKEN_A = "token-from-the-file-0123456789"
TOKEN_B = "token-from-the-environment-0123"
TOKEN_C = "token-of-the-default-state-dir-0"


def test_the_token_is_found_by_itself(
    stub: Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub.routes["GET", "/workflows/deployments"] = (200, {"deployments": []})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "given").write_text(TOKEN_A + "\n")
    no_env = {"MAILRUN_TOKEN": None}

    assert cli(stub, "deployments", env=no_env).exit_code == 0  # nothing to find: none sent
    (tmp_path / "mailrun-state").mkdir()
    (tmp_path / "mailrun-state" / "admin-token").write_text(TOKEN_C + "\n")
    assert cli(stub, "deployments", env=no_env).exit_code == 0
    assert cli(stub, "deployments", env={"MAILRUN_TOKEN": TOKEN_B}).exit_code == 0
    result = cli(stub, "deployments", "--token-file", "given", env={"MAILRUN_TOKEN": TOKEN_B})
    assert result.exit_code == 0
    assert stub.authorization == [None, *(f"Bearer {t}" for t in (TOKEN_C, TOKEN_B, TOKEN_A))]


def test_a_refusal_for_want_of_a_token_says_where_tokens_come_from(stub: Stub) -> None:
    stub.routes["GET", "/workflows/deployments"] = (
        401,
        {"status": "error", "reason": "unauthorized", "detail": "send a token"},
    )
    result = cli(stub, "deployments", env={"MAILRUN_TOKEN": None})
    assert result.exit_code == 1
    assert result.stderr.startswith("error: unauthorized: send a token (the CLI sends the token")
    assert "--token-file F, else $MAILRUN_TOKEN, else mailrun-state/admin-token" in result.stderr


@pytest.mark.parametrize("content", [None, "", "short", "two\nlines-of-a-token-here"])
def test_a_token_file_without_a_token_is_an_error_and_nothing_is_sent(
    stub: Stub, tmp_path: Path, content: str | None
) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    result = cli(stub, "deployments", "--token-file", str(path))
    assert result.exit_code == 1
    assert result.stderr.startswith("error: admin_token_unavailable: ")
    assert stub.requests == []
    bad = cli(stub, "deployments", env={"MAILRUN_TOKEN": "a b"})
    assert bad.exit_code == 1 and "MAILRUN_TOKEN does not hold a token" in bad.stderr


@pytest.mark.slow  # a real `mailrun` or hub process per case
@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("hub.accept.before_comit=crash", "unknown failpoint 'hub.accept.before_comit'"),
        ("hub.accept.before_commit=explode", "bad failpoint 'hub.accept.before_commit=explode'"),
    ],
)
@pytest.mark.parametrize("command", [["deployments"], ["up", "--state-dir", "{tmp}"], ["hub"]])
def test_a_bad_failpoint_spec_is_one_error_line_and_a_non_zero_exit(
    tmp_path: Path, command: list[str], spec: str, error: str
) -> None:
    if command == ["hub"]:  # `python -m hub`, the way `up` starts it
        argv = [sys.executable, "-m", "hub", "--state-dir", str(tmp_path)]
    else:
        mailrun = [sys.executable, "-c", "from hub.cli import main; main()"]
        argv = [*mailrun, *(a.format(tmp=tmp_path) for a in command)]
    done = subprocess.run(
        argv,
        env={**os.environ, "MAILRUN_FAILPOINTS": spec, "MAILRUN_HUB": "http://127.0.0.1:1"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert f"MAILRUN_FAILPOINTS: {error}" in line
    assert line.startswith("error: ") or " ERROR mailrun.hub: hub failed: " in line
    assert list(tmp_path.iterdir()) == []  # it did nothing else


@pytest.mark.slow  # a real hub process
def test_a_hub_with_failpoints_armed_says_so_at_start(tmp_path: Path) -> None:
    log = tmp_path / "hub.log"
    spec = "hub.accept.before_commit=1*raise;hub.events.after_commit=sleep(5)"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            # No NATS there: the hub waits for it, after its start.
            [sys.executable, "-m", "hub", "--state-dir", str(tmp_path / "state")],
            env={**os.environ, "MAILRUN_FAILPOINTS": spec, NATS_URL_ENV: "nats://127.0.0.1:1"},
            stdout=out,
            stderr=out,
        )
    try:

        async def warned() -> bool:
            return "failpoints armed" in log.read_text()

        # Its start, up to where it waits for NATS, as long as up waits for a hub.
        anyio.run(
            functools.partial(
                started, warned, exit_code=proc.poll, logs=[log], timeout=HUB_START_TIMEOUT,
                what="the warning",
            )
        )  # fmt: skip
    finally:
        proc.kill()
        proc.wait()
    (line,) = [line for line in log.read_text().splitlines() if "failpoints armed" in line]
    assert " WARNING mailrun.failpoints: failpoints armed (MAILRUN_FAILPOINTS): " in line
    assert line.endswith("hub.accept.before_commit=1*raise; hub.events.after_commit=sleep(5)")


def test_deploy_sends_the_failure_policy_given(stub: Stub, tmp_path: Path) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text("x = 1\n")
    policy = {"on_failure": "park", "max_attempts": 3, "max_backoff": 1.5, "handler_timeout": 9.0}
    stub.routes["POST", "/workflows/deployments"] = (201, deployment(DEP_A, "f", **policy))
    args = ["--on-failure", "park", "--max-attempts", "3", "--max-backoff", "1.5",
            "--handler-timeout", "9"]  # fmt: skip
    result = cli(stub, "deploy", str(flow), "--name", "f", *args)
    assert result.exit_code == 0, result.output
    assert stub.requests == [
        ("POST", "/workflows/deployments", {"name": "f", "source": "x = 1\n", **policy})
    ]
    out = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert (out["on_failure"], out["max_attempts"]) == ("park", "3")
    refused = cli(stub, "deploy", str(flow), "--name", "f", "--on-failure", "ignore")
    assert refused.exit_code == 2 and "ignore" in refused.output


def test_deploy_update_patches_the_policy_options_given(stub: Stub, tmp_path: Path) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text("x = 2\n")
    stub.routes["PATCH", "/workflows/deployments/f"] = (200, deployment(DEP_A, "f"))
    stub.routes["POST", "/workflows/deployments/f/versions?wait=8"] = (
        201, {"deployment_id": DEP_A, "version": 2, "status": "ready", "active": True},
    )  # fmt: skip
    result = cli(stub, "deploy", str(flow), "--name", "f", "--update", "--max-attempts", "7")
    assert result.exit_code == 0, result.output
    assert stub.requests == [
        ("PATCH", "/workflows/deployments/f", {"max_attempts": 7}),
        ("POST", "/workflows/deployments/f/versions?wait=8", {"source": "x = 2\n"}),
    ]
    stub.requests.clear()
    assert cli(stub, "deploy", str(flow), "--name", "f", "--update").exit_code == 0
    assert [r[0] for r in stub.requests] == ["POST"]  # no option: no PATCH


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


SCH_A = "sch_" + "4" * 26
SCHEDULES = f"/workflows/deployments/{DEP_A}/schedules"


def a_schedule(**extra: Any) -> dict[str, Any]:
    return {
        "id": SCH_A, "deployment_id": DEP_A, "every": 60.0, "cron": None, "tz": "UTC",
        "subject": "tick", "payload": {"n": 1}, "next_due": 1767225660.0,
        "created_at": 1767225600.0, **extra,
    }  # fmt: skip


def test_schedule_add_sends_every_or_cron_with_the_json_payload(stub: Stub) -> None:
    stub.routes["POST", SCHEDULES] = (201, a_schedule())
    result = cli(stub, "schedule", "add", DEP_A, "--every", "60", "--subject", "tick",
                 "--payload", '{"n": 1}')  # fmt: skip
    assert result.exit_code == 0, result.output
    out = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert (out["id"], out["every"], out["payload"]) == (SCH_A, "60.0", '{"n":1}')
    assert out["next_due"] == "2026-01-01 00:01:00"
    weekdays = ["--cron", "0 9 * * 1-5", "--tz", "Europe/Paris"]
    assert cli(stub, "schedule", "add", DEP_A, *weekdays).exit_code == 0
    assert stub.requests == [
        ("POST", SCHEDULES, {"subject": "tick", "every": 60.0, "payload": {"n": 1}}),
        ("POST", SCHEDULES, {"subject": "", "cron": "0 9 * * 1-5", "tz": "Europe/Paris"}),
    ]


def test_schedule_add_refuses_a_payload_that_is_not_json(stub: Stub) -> None:
    result = cli(stub, "schedule", "add", DEP_A, "--every", "60", "--payload", "{n: 1}")
    assert result.exit_code == 2 and "--payload" in result.output
    assert stub.requests == []


def test_schedule_add_that_the_hub_refuses_exits_1_with_its_reason(stub: Stub) -> None:
    stub.routes["POST", SCHEDULES] = (
        422,
        {"status": "error", "reason": "invalid_schedule", "detail": "unknown time zone 'Mars'"},
    )
    result = cli(stub, "schedule", "add", DEP_A, "--cron", "* * * * *", "--tz", "Mars")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: invalid_schedule: unknown time zone 'Mars'"


def test_schedule_list_prints_a_table_and_remove_names_the_schedule(stub: Stub) -> None:
    cron = a_schedule(id="sch_" + "5" * 26, every=None, cron="0 9 * * 1-5", tz="Europe/Paris")
    stub.routes["GET", SCHEDULES] = (200, {"schedules": [a_schedule(), cron]})
    stub.routes["DELETE", f"{SCHEDULES}/{SCH_A}"] = (200, a_schedule())
    result = cli(stub, "schedule", "list", DEP_A)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "WHEN", "SUBJECT", "NEXT", "DUE"]
    assert lines[1].split()[:3] == [SCH_A, "every", "60s"]
    assert "cron 0 9 * * 1-5 (Europe/Paris)" in lines[2]
    result = cli(stub, "schedule", "remove", DEP_A, SCH_A)
    assert result.exit_code == 0 and SCH_A in result.stdout
    assert stub.requests[-1] == ("DELETE", f"{SCHEDULES}/{SCH_A}", None)
    missing = cli(stub, "schedule", "remove", DEP_A, "sch_nothing")
    assert missing.exit_code == 1 and "not_found" in missing.stderr


def test_deploy_sends_the_mail_settings_given(stub: Stub, tmp_path: Path) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text("x = 1\n")
    mail = {"allow_from": ["*@example.test", "boss@other.test"], "deny_from": ["x@example.test"],
            "require_dmarc": True, "replies_to_ended": "refuse", "catch_all": False}  # fmt: skip
    stub.routes["POST", "/workflows/deployments"] = (201, deployment(DEP_A, "f", mail=mail))
    args = ["--allow-from", "*@example.test", "--allow-from", "boss@other.test",
            "--deny-from", "x@example.test", "--require-dmarc", "--replies-to-ended", "refuse",
            "--no-catch-all"]  # fmt: skip
    result = cli(stub, "deploy", str(flow), "--name", "f", *args)
    assert result.exit_code == 0, result.output
    assert stub.requests == [
        ("POST", "/workflows/deployments", {"name": "f", "source": "x = 1\n", "mail": mail})
    ]
    out = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert out["mail"] == (
        "allow_from=*@example.test,boss@other.test deny_from=x@example.test require_dmarc"
        " replies_to_ended=refuse"
    )
    refused = cli(stub, "deploy", str(flow), "--name", "f", "--replies-to-ended", "child")
    assert refused.exit_code == 2 and "child" in refused.output


def test_deploy_update_patches_the_mail_settings_given(stub: Stub, tmp_path: Path) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text("x = 2\n")
    stub.routes["PATCH", "/workflows/deployments/f"] = (200, deployment(DEP_A, "f"))
    stub.routes["POST", "/workflows/deployments/f/versions?wait=8"] = (
        201, {"deployment_id": DEP_A, "version": 2, "status": "ready", "active": True},
    )  # fmt: skip
    result = cli(stub, "deploy", str(flow), "--name", "f", "--update", "--catch-all",
                 "--deny-from", "*@spam.test", "--max-attempts", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert stub.requests[0] == (
        "PATCH",
        "/workflows/deployments/f",
        {"max_attempts": 2, "mail": {"deny_from": ["*@spam.test"], "catch_all": True}},
    )
