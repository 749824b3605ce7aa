"""The `mailrun` CLI's client side against a stub hub: how it renders tables,
JSON and the hub's errors, where it finds the hub and its token, and the async
client that answers and fails like the sync one.

The stub (tests/hub/cli/stubhub.py) is a real HTTP server on a loopback port
that answers canned JSON and records each request; the real hub is exercised
in tests/hub/up/test_up.py and tests/e2e.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from hub._client import AsyncHubClient
from hub._errors import HubResponseError, HubUnreachable
from hub.cli.main import main
from tests.hub.cli.stubhub import DEP_A, DEP_B, RUN_A, Stub, cli, deployment


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
