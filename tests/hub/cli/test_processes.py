"""The commands that start processes, and the command group itself: `mailrun
sidecar` execs `python -m sidecar` with its options, `mailrun hub` and `up`
take their settings from options and the environment (and refuse what makes
no sense before anything starts), failpoints, and every command listed."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from hub import HubSettings
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
from tests.hub.cli.stubhub import DEP_A
from tests.support.launch.starts import HUB_START_TIMEOUT, started


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
                "-P",  # the working directory off sys.path
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
    assert calls[0][4:] == ["--state-dir", "d", "--join", "tok"]  # after python -P -m sidecar


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
