"""`mailrun send` and `outbox` against a stub hub: the mail sent as the
hub's API takes it, and the outbound relay's rows printed as a table."""

from __future__ import annotations

import base64
from pathlib import Path

from tests.hub.cli.stubhub import DEP_A, DSP_A, RUN_A, Stub, cli


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
