"""runtime's shared defaults and its one HOST:PORT parser."""

from __future__ import annotations

import pytest

from runtime.config import (
    DEFAULT_HTTP,
    DEFAULT_HUB_URL,
    DEFAULT_NATS_URL,
    HostPort,
    parse_host_port,
    redact_url,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8470", HostPort("127.0.0.1", 8470)),
        ("0.0.0.0:1", HostPort("0.0.0.0", 1)),
        ("hub.internal:80", HostPort("hub.internal", 80)),
        ("[::1]:8470", HostPort("::1", 8470)),
        ("[::]:65535", HostPort("::", 65535)),
        ("localhost:08470", HostPort("localhost", 8470)),
    ],
)
def test_a_host_and_port_parse(text: str, expected: HostPort) -> None:
    assert parse_host_port(text) == expected
    assert parse_host_port(text, allow_port_zero=True) == expected


@pytest.mark.parametrize(
    "text",
    [
        "8470",  # no port separator
        "localhost",
        ":8470",  # missing host
        "[]:8470",
        "::1:8470",  # IPv6 without brackets
        "[::1:8470",
        "h[x]:8470",
        "h:",  # missing port
        "h:port",
        "h:-1",
        "h:+80",
        "h: 80",
        "h:\u0668\u0660",  # digits, but not ASCII ones
        "h:65536",
        "h:70000",
    ],
)
def test_a_malformed_address_is_refused_naming_the_format(text: str) -> None:
    for allow_port_zero in (False, True):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_host_port(text, allow_port_zero=allow_port_zero)


def test_port_zero_is_for_the_process_that_binds() -> None:
    with pytest.raises(ValueError, match="port from 1 to 65535"):
        parse_host_port("127.0.0.1:0")
    assert parse_host_port("127.0.0.1:0", allow_port_zero=True) == HostPort("127.0.0.1", 0)
    assert parse_host_port("[::1]:0", allow_port_zero=True) == HostPort("::1", 0)


@pytest.mark.parametrize("text", ["127.0.0.1:8470", "hub.internal:80", "[::1]:8470"])
def test_an_address_writes_back_as_it_was_given(text: str) -> None:
    assert str(parse_host_port(text)) == text


def test_the_defaults_are_the_documented_ones() -> None:
    # README, docs/operations.md and compose.yaml state these.
    assert DEFAULT_HTTP == "127.0.0.1:8470"
    assert DEFAULT_HUB_URL == "http://127.0.0.1:8470"
    assert DEFAULT_NATS_URL == "nats://127.0.0.1:4222"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("nats://user:s3cret@nats.internal:4222", "nats://nats.internal:4222"),
        ("nats://token@127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("tls://u:p/w@x@host:4443", "tls://host:4443"),  # unescaped / and @ in the password
        ("nats://a:1@h1:4222,nats://b:2@h2:4222", "nats://h1:4222,nats://h2:4222"),
        ("user:pw@host:4222", "host:4222"),
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("", ""),
    ],
)
def test_a_url_is_shown_without_its_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redact_url(shown) == shown
