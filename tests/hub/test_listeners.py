"""The hub's listening sockets (hub/_listeners.py): bound, or inherited
from the process that started it, and refused when they are not usable."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hub._errors import ListenerError, ListenerUnusable, PortInUse
from hub._listeners import bind_socket, inherited_socket, listening_socket
from tests.support import REPO


def test_a_bound_port_is_refused_to_a_second_listener() -> None:
    with bind_socket("127.0.0.1", 0) as first:
        port = first.getsockname()[1]
        with pytest.raises(PortInUse, match=rf"127.0.0.1:{port} is in use"):
            bind_socket("127.0.0.1", port)
    assert issubclass(PortInUse, ListenerError)


def test_an_inherited_listener_is_served_on_and_the_caller_keeps_its_copy() -> None:
    with bind_socket("127.0.0.1", 0) as held:
        copy = os.dup(held.fileno())
        sock = listening_socket(copy, "127.0.0.1", 1)  # the address is not bound: the fd wins
        with sock:
            assert sock.getsockname() == held.getsockname()
            assert not sock.get_inheritable()  # the hub's own children do not get it
            with socket.create_connection(held.getsockname()):
                accepted, _ = sock.accept()
                accepted.close()
        # Closing the hub's copy leaves the holder's listening: who connects
        # now waits in its queue for the next process to accept.
        with socket.create_connection(held.getsockname()):
            accepted, _ = held.accept()
            accepted.close()


@pytest.mark.parametrize("kind", ["not listening", "udp", "a file", "closed"])
def test_a_descriptor_that_is_no_listening_tcp_socket_is_refused_and_left_open(
    tmp_path: Path, kind: str
) -> None:
    match kind:
        case "not listening":
            fd = socket.socket().detach()
        case "udp":
            fd = socket.socket(type=socket.SOCK_DGRAM).detach()
        case "a file":
            fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
        case _:
            fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
            os.close(fd)
    try:
        with pytest.raises(ListenerUnusable, match=rf"descriptor {fd} "):
            inherited_socket(fd)
        if kind != "closed":
            os.fstat(fd)  # still open: it was not the hub's to close
    finally:
        if kind != "closed":
            os.close(fd)


def test_the_hub_does_not_start_on_a_descriptor_that_does_not_listen(tmp_path: Path) -> None:
    with socket.socket() as idle:  # bound, never listening
        idle.bind(("127.0.0.1", 0))
        fd = idle.fileno()
        argv = [sys.executable, "-m", "hub", "--state-dir", str(tmp_path / "hub")]
        argv += ["--http-fd", str(fd), "--nats", "nats://127.0.0.1:1"]
        done = subprocess.run(
            argv,
            cwd=REPO,
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"descriptor {fd} is a TCP socket that does not listen" in done.stderr
    assert not (tmp_path / "hub" / "hub.db").exists()  # it stopped before anything started
