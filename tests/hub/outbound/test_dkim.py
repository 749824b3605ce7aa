"""``--dkim-key`` and ``--dkim-selector`` (on ``mailrun hub`` and ``mailrun
up``) and ``mailrun dkim-record``: keys paired with their selectors per
domain, a key that cannot sign stops the hub and ``up`` before they start,
and the printed record is what a DNS zone takes."""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from pathlib import Path

import dkim
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from hub import HubSettings
from hub._errors import DkimKeyError
from hub.cli import main
from hub.outbound import dkim_keys, dkim_signer, dns_record, generate_key, read_key


def pem_of(
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, password: bytes | None = None
) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if password is None
        else serialization.BestAvailableEncryption(password)
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "dkim.pem"
    assert generate_key(path)
    return path


def test_generate_writes_a_private_2048_bit_key_once(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    assert generate_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_bytes()
    key = serialization.load_pem_private_key(first, password=None)
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 2048
    assert not generate_key(path)  # never replaced
    assert path.read_bytes() == first


def test_the_record_is_zone_file_text_in_strings_of_at_most_255_bytes(key_file: Path) -> None:
    pem = read_key(key_file)
    record = dns_record(pem, "mail2026", "Example.ORG")
    name, _, rest = record.partition(" IN TXT ")
    assert name == "mail2026._domainkey.example.org."
    strings = re.findall(r'"([^"]*)"', rest)
    assert rest == " ".join(f'"{s}"' for s in strings)
    assert len(strings) == 2 and all(len(s.encode()) <= 255 for s in strings)
    value = "".join(strings)
    assert value.startswith("v=DKIM1; k=rsa; p=MII")
    # What dkimpy reads from DNS verifies what the key signs.
    signer = dkim_signer([str(key_file)], ["mail2026"])
    assert signer is not None
    message = signer.sign(b"From: a@example.org\r\nSubject: s\r\n\r\nbody\r\n", "example.org")
    assert dkim.verify(message, dnsfunc=lambda name, timeout=5: value.encode())


def test_a_pkcs8_key_signs_like_a_pkcs1_one(tmp_path: Path) -> None:
    path = tmp_path / "pkcs8.pem"
    path.write_bytes(pem_of(_rsa()))
    assert read_key(path).startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    assert dkim_signer([str(path)], ["s"]) is not None


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (lambda: None, "No such file"),
        (lambda: b"not a key", "not a PEM private key"),
        (lambda: pem_of(ec.generate_private_key(ec.SECP256R1())), "not an RSA key"),
        (lambda: pem_of(_rsa(), b"pw"), "encrypted"),
    ],
)
def test_a_key_that_cannot_sign_is_a_typed_error(
    tmp_path: Path, content: Callable[[], bytes | None], why: str
) -> None:
    path = tmp_path / "bad.pem"
    data = content()  # made here, not when the tests are collected
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(DkimKeyError, match=why) as caught:
        dkim_keys([str(path)], ["s"])
    assert caught.value.reason == "dkim_key_invalid"


def test_keys_pair_with_selectors_per_domain_and_the_default(
    tmp_path: Path, key_file: Path
) -> None:
    other = tmp_path / "other.pem"
    generate_key(other)
    keys = dkim_keys(
        [f"a.example={other}", str(key_file), f"B.Example={key_file}"],
        ["s0", "a.example=sa"],
    )
    assert [(k.domain, k.selector, k.path) for k in keys] == [
        ("a.example", "sa", other),
        (None, "s0", key_file),
        ("b.example", "s0", key_file),  # its own key, the default selector
    ]
    signer = dkim_signer([f"a.example={other}", str(key_file)], ["s0", "a.example=sa"])
    assert signer is not None
    assert signer.key_for("A.example") is not None and signer.key_for("A.example").selector == "sa"  # type: ignore[union-attr]
    assert signer.key_for("elsewhere.org") is not None
    assert signer.key_for("elsewhere.org").domain is None  # type: ignore[union-attr]
    assert "BEGIN" not in repr(signer)  # the key is not in a log line
    assert dkim_signer([], []) is None


@pytest.mark.parametrize(
    ("keys", "selectors", "why"),
    [
        (["{key}"], [], "no --dkim-selector"),
        ([], ["s"], "no --dkim-key"),
        (["a.example={key}"], ["b.example=s"], "no --dkim-key"),
        (["{key}", "{key}"], ["s"], "twice"),
        (["{key}"], ["s", "t"], "twice"),
        (["{key}"], ["bad selector"], "not a DNS name"),
        ([""], ["s"], "empty"),
    ],
)
def test_options_that_do_not_pair_are_refused(
    key_file: Path, keys: list[str], selectors: list[str], why: str
) -> None:
    with pytest.raises(DkimKeyError, match=why):
        dkim_keys([k.format(key=key_file) for k in keys], selectors)


def test_the_hub_command_reads_the_keys_into_its_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key_file: Path
) -> None:
    calls: list[HubSettings] = []
    monkeypatch.setattr("hub._server.run_hub", calls.append)
    args = ["hub", "--state-dir", str(tmp_path / "s"), "--dkim-key", str(key_file)]
    result = CliRunner().invoke(main, [*args, "--dkim-selector", "s1"])
    assert result.exit_code == 0, result.output
    (settings,) = calls
    assert settings.dkim is not None
    assert [(k.domain, k.selector, k.path) for k in settings.dkim.keys] == [(None, "s1", key_file)]


@pytest.mark.parametrize("command", ["hub", "up"])
def test_a_key_that_cannot_be_read_stops_hub_and_up_before_they_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str
) -> None:
    monkeypatch.setattr("hub._server.run_hub", lambda settings: pytest.fail("started"))
    state = tmp_path / "state"
    missing = tmp_path / "missing.pem"
    args = [command, "--state-dir", str(state), "--dkim-key", str(missing)]
    result = CliRunner().invoke(main, [*args, "--dkim-selector", "s1"])
    assert result.exit_code == 1
    if command == "up":
        assert "dkim_key_invalid" in result.output and str(missing) in result.output
        assert not state.exists()


def test_dkim_record_generates_once_and_prints_the_same_record_again(tmp_path: Path) -> None:
    key = tmp_path / "new.pem"
    args = ["dkim-record", "--dkim-key", str(key), "--dkim-selector", "s1"]
    args += ["--domain", "example.org"]
    first = CliRunner().invoke(main, [*args, "--generate"])
    assert first.exit_code == 0, first.output
    assert "wrote a new key" in first.stderr
    again = CliRunner().invoke(main, [*args, "--generate"])
    plain = CliRunner().invoke(main, args)
    assert first.stdout == again.stdout == plain.stdout
    assert "wrote" not in again.stderr
    assert first.stdout.startswith('s1._domainkey.example.org. IN TXT "v=DKIM1; k=rsa; p=')
    assert first.stdout == dns_record(read_key(key), "s1", "example.org") + "\n"


def test_dkim_record_without_a_key_fails_and_writes_nothing(tmp_path: Path) -> None:
    key = tmp_path / "none.pem"
    args = ["dkim-record", "--dkim-key", str(key), "--dkim-selector", "s1"]
    result = CliRunner().invoke(main, [*args, "--domain", "example.org"])
    assert result.exit_code == 1
    assert "dkim_key_invalid" in result.output
    assert not key.exists()
    bad = CliRunner().invoke(main, [*args, "--domain", "not a domain"])
    assert bad.exit_code == 2
