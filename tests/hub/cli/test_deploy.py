"""`mailrun deploy`, `delete` and `schedule` against a stub hub: what they
send (the source, the failure policy, the mail settings, a schedule's payload)
and what they print and exit with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.hub.cli.stubhub import DEP_A, Stub, cli, deployment


def an_update(stub: Stub, tmp_path: Path) -> Path:
    """A new version of deployment ``f`` to deploy with ``--update``: its
    file, and the stub's answers to the settings' PATCH and the upload."""
    flow = tmp_path / "flow.py"
    flow.write_text("x = 2\n")
    stub.routes["PATCH", "/workflows/deployments/f"] = (200, deployment(DEP_A, "f"))
    stub.routes["POST", "/workflows/deployments/f/versions?wait=8"] = (
        201, {"deployment_id": DEP_A, "version": 2, "status": "ready", "active": True},
    )  # fmt: skip
    return flow


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
    flow = an_update(stub, tmp_path)
    result = cli(stub, "deploy", str(flow), "--name", "f", "--update", "--max-attempts", "7")
    assert result.exit_code == 0, result.output
    assert stub.requests == [
        ("PATCH", "/workflows/deployments/f", {"max_attempts": 7}),
        ("POST", "/workflows/deployments/f/versions?wait=8", {"source": "x = 2\n"}),
    ]
    stub.requests.clear()
    assert cli(stub, "deploy", str(flow), "--name", "f", "--update").exit_code == 0
    assert [r[0] for r in stub.requests] == ["POST"]  # no option: no PATCH


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
    flow = an_update(stub, tmp_path)
    result = cli(stub, "deploy", str(flow), "--name", "f", "--update", "--catch-all",
                 "--deny-from", "*@spam.test", "--max-attempts", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert stub.requests[0] == (
        "PATCH",
        "/workflows/deployments/f",
        {"max_attempts": 2, "mail": {"deny_from": ["*@spam.test"], "catch_all": True}},
    )
