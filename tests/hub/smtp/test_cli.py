"""``--smtp``, ``--smtp-cert``, ``--smtp-key`` and the mail domains (``--domain``)
on ``mailrun up`` and ``mailrun hub``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hub import HubSettings
from hub.cli import main
from tests.support.servers.smtp import self_signed


def test_hub_passes_the_smtp_options_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[HubSettings] = []
    monkeypatch.setattr("hub._server.run_hub", calls.append)
    _, cert = self_signed(tmp_path)
    key = tmp_path / "relay.key"
    args = ["hub", "--state-dir", str(tmp_path / "s"), "--smtp", "127.0.0.1:0"]
    result = CliRunner().invoke(main, [*args, "--smtp-cert", str(cert), "--smtp-key", str(key)])
    assert result.exit_code == 0, result.output
    (settings,) = calls
    assert settings.smtp is not None
    assert (settings.smtp.address, settings.smtp.cert_file, settings.smtp.key_file) == (
        "127.0.0.1:0",
        cert,
        key,
    )


@pytest.mark.parametrize("command", ["up", "hub"])
@pytest.mark.parametrize("bad", ["2525", "localhost", "h:70000"])
def test_a_malformed_smtp_address_is_a_usage_error(command: str, bad: str) -> None:
    extra = ["--state-dir", "d"] if command == "hub" else []
    result = CliRunner().invoke(main, [command, *extra, "--smtp", bad])
    assert result.exit_code == 2
    assert "HOST:PORT" in result.output


def test_up_takes_no_port_zero_since_it_announces_the_address() -> None:
    assert CliRunner().invoke(main, ["up", "--smtp", "127.0.0.1:0"]).exit_code == 2


@pytest.mark.parametrize("command", ["up", "hub"])
def test_a_certificate_without_smtp_is_refused(command: str, tmp_path: Path) -> None:
    _, cert = self_signed(tmp_path)
    extra = ["--state-dir", str(tmp_path / "s")] if command == "hub" else []
    args = [command, *extra, "--smtp-cert", str(cert), "--smtp-key", str(tmp_path / "relay.key")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "need --smtp" in result.output


def test_up_refuses_a_reachable_bind_without_login_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MAILRUN_SMTP_USER", raising=False)
    monkeypatch.delenv("MAILRUN_SMTP_PASSWORD", raising=False)
    state = tmp_path / "state"
    result = CliRunner().invoke(main, ["up", "--state-dir", str(state), "--smtp", "0.0.0.0:2525"])
    assert result.exit_code == 1
    assert "smtp_config_invalid" in result.output and "MAILRUN_SMTP_USER" in result.output
    assert not state.exists()


def test_domain_repeats_its_first_is_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[HubSettings] = []
    monkeypatch.setattr("hub._server.run_hub", calls.append)
    args = ["hub", "--state-dir", str(tmp_path / "s"), "--domain", "Example.org"]
    result = CliRunner().invoke(main, [*args, "--domain", "b.example", "--domain", "example.org"])
    assert result.exit_code == 0, result.output
    ((settings),) = calls
    assert (settings.domain, settings.domains) == ("example.org", ("b.example",))
    bad = CliRunner().invoke(main, ["hub", "--state-dir", "s", "--domain", "not a domain"])
    assert bad.exit_code == 2 and "not a mail domain" in bad.output


def test_hub_passes_the_sender_check_options_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[HubSettings] = []
    monkeypatch.setattr("hub._server.run_hub", calls.append)
    args = ["hub", "--state-dir", str(tmp_path / "s"), "--smtp", "127.0.0.1:0",
            "--dns-server", "127.0.0.1:5353", "--smtp-trusted-relay", "mx1.example.test",
            "--smtp-trusted-relay", "192.0.2.25"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (settings,) = calls
    assert settings.smtp is not None
    assert str(settings.smtp.dns_server) == "127.0.0.1:5353"
    assert settings.smtp.trusted_relays == ("mx1.example.test", "192.0.2.25")


@pytest.mark.parametrize("command", ["up", "hub"])
def test_sender_check_options_need_smtp(command: str, tmp_path: Path) -> None:
    extra = ["--state-dir", str(tmp_path / "s")] if command == "hub" else []
    result = CliRunner().invoke(main, [command, *extra, "--dns-server", "127.0.0.1:53"])
    assert result.exit_code == 1
    assert "need --smtp" in result.output


def test_up_refuses_a_resolver_named_not_addressed_before_starting_anything(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    args = ["up", "--state-dir", str(state), "--smtp", "127.0.0.1:2525"]
    result = CliRunner().invoke(main, [*args, "--dns-server", "dns.example.test:53"])
    assert result.exit_code == 1
    assert "smtp_config_invalid" in result.output and "--dns-server" in result.output
    assert not state.exists()
