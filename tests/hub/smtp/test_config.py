"""``--smtp`` and what goes with it: checked whole before anything binds."""

from __future__ import annotations

from pathlib import Path

import pytest

from hub._errors import SmtpConfigError
from hub.smtp import PASSWORD_ENV, USER_ENV, is_loopback, smtp_config
from tests.support.servers.smtp import self_signed

LOGIN = {USER_ENV: "robot", PASSWORD_ENV: "s3cret"}


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    _, cert_file = self_signed(tmp_path)
    return cert_file, tmp_path / "relay.key"


def test_loopback_without_login_or_tls_is_fine() -> None:
    config = smtp_config("127.0.0.1:2525", {})
    assert (config.host, config.port, config.auth) == ("127.0.0.1", 2525, False)
    assert config.tls_context() is None
    assert "s3cret" not in repr(smtp_config("127.0.0.1:2525", {}))


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "mail.example.com", "[::]"])
def test_a_bind_others_can_reach_needs_a_login(host: str) -> None:
    with pytest.raises(SmtpConfigError, match=USER_ENV):
        smtp_config(f"{host}:2525", {})


def test_a_reachable_bind_with_login_and_certificate_starts(cert: tuple[Path, Path]) -> None:
    config = smtp_config("0.0.0.0:2525", LOGIN, cert_file=cert[0], key_file=cert[1])
    assert config.auth and config.tls_context() is not None
    assert "s3cret" not in repr(config)


def test_a_login_needs_a_certificate_since_auth_is_offered_only_over_tls() -> None:
    with pytest.raises(SmtpConfigError, match="STARTTLS"):
        smtp_config("127.0.0.1:2525", LOGIN)


@pytest.mark.parametrize(
    ("environ", "files", "match"),
    [
        ({USER_ENV: "robot"}, (True, True), "both"),
        ({PASSWORD_ENV: "x"}, (True, True), "both"),
        ({}, (True, False), "--smtp-key"),
    ],
)
def test_halves_are_refused(
    cert: tuple[Path, Path], environ: dict[str, str], files: tuple[bool, bool], match: str
) -> None:
    cert_file = cert[0] if files[0] else None
    key_file = cert[1] if files[1] else None
    with pytest.raises(SmtpConfigError, match=match):
        smtp_config("127.0.0.1:2525", environ, cert_file=cert_file, key_file=key_file)


def test_a_certificate_that_does_not_load_is_refused_at_start(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("not a certificate")
    with pytest.raises(SmtpConfigError, match=r"bogus\.pem"):
        smtp_config("127.0.0.1:2525", {}, cert_file=bogus, key_file=bogus)


@pytest.mark.parametrize("value", ["2525", "127.0.0.1", "127.0.0.1:0", "::1:25"])
def test_a_bad_address_is_refused(value: str) -> None:
    with pytest.raises(SmtpConfigError, match="--smtp"):
        smtp_config(value, {})


def test_loopback_means_only_this_host() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.1.2.3") and is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("example")


def test_the_message_limit_leaves_room_for_base64() -> None:
    config = smtp_config("127.0.0.1:2525", {})
    assert config.message_limit(1000) > 1000 * 4 // 3
