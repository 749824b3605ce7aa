"""The ports ``up`` and ``demo`` choose themselves (hub/up/config/ports.py), and the
test run's share of them (tests/support/launch/ports.py)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from hub._errors import ListenerError, NoFreePort, PortInUse, UpError
from hub.up import PORTS_ENV, free_port, parse_ports
from hub.up.config import embedded_nats_port, ephemeral_ports, hold_listeners, port_is_free
from tests.support.launch import ports as test_ports


@contextmanager
def held(ports: range) -> Iterator[list[int]]:
    """Bind every port of ``ports`` that is free; the ones it holds."""
    with ExitStack() as stack:
        taken = []
        for port in ports:
            sock = stack.enter_context(socket.socket())
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            taken.append(port)
        yield taken


def window(size: int) -> range:
    """``size`` ports of this worker's own (tests/conftest.py)."""
    ours = test_ports.assigned_ports()
    assert ours is not None and len(ours) >= 2 * size
    return ours[len(ours) // 2 : len(ours) // 2 + size]


def free_window(size: int) -> range:
    """``size`` ports in a row of this worker's own, every one free now: an
    earlier test's port may linger in TIME_WAIT, which ``free_port`` (rightly)
    does not hand out."""
    ours = test_ports.assigned_ports()
    assert ours is not None
    for start in range(ours.start + len(ours) // 2, ours.stop - size):
        ports = range(start, start + size)
        if all(port_is_free(port) for port in ports):
            return ports
    pytest.fail(f"no {size} ports in a row free")


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
    with socket.socket() as held_one:
        held_one.bind(("127.0.0.1", 0))
        held_one.listen()
        busy = held_one.getsockname()[1]
        # Every draw lands on the busy port: the fallback (the OS's pick) answers.
        monkeypatch.setattr("hub.up.config.ports._LOWEST", busy)
        monkeypatch.setattr(
            "hub.up.config.ports.ephemeral_ports", lambda: range(busy + 1, busy + 2)
        )
        assert free_port() != busy


def test_choosers_with_disjoint_ranges_never_share_a_port() -> None:
    # What keeps two xdist workers apart: one's port, down while its server
    # restarts, is never the other's pick.
    ports = free_window(4)
    mine, theirs = ports[:2], ports[2:]
    picked_mine = {free_port(within=mine) for _ in range(40)}
    picked_theirs = {free_port(within=theirs) for _ in range(40)}
    assert picked_mine <= set(mine) and picked_theirs <= set(theirs)
    assert picked_mine and picked_theirs


def test_the_last_free_port_of_a_range_is_found() -> None:
    ports = window(200)
    with held(ports) as taken:
        assert len(taken) > 100  # the worker's own ports: nearly all free
        last = taken.pop()
    with held(ports[: ports.index(last)]), held(ports[ports.index(last) + 1 :]):
        # 64 random draws would miss it most times: every port is looked at.
        assert free_port(within=ports) == last


def test_a_full_range_is_a_typed_error() -> None:
    ours = test_ports.assigned_ports()
    assert ours is not None
    # Three ports in a row this test can hold all of (an earlier test's port
    # may linger in TIME_WAIT).
    for start in range(ours.start, ours.stop - 3, 3):
        ports = range(start, start + 3)
        with held(ports) as taken:
            if taken != list(ports):
                continue
            with pytest.raises(NoFreePort, match=f"no port of {ports.start}-{ports.stop - 1}"):
                free_port(within=ports)
            break
    else:
        pytest.fail("no three ports in a row free")
    assert issubclass(NoFreePort, UpError)


def test_ports_to_avoid_are_never_handed_out() -> None:
    ports = free_window(2)
    assert {free_port(within=ports, avoid={ports[0]}) for _ in range(20)} == {ports[1]}


def test_up_takes_its_nats_port_from_its_range() -> None:
    ports = window(10)
    assert {embedded_nats_port(ports) for _ in range(20)} <= set(ports)


@pytest.mark.parametrize(
    ("text", "ports"),
    [("10000-10009", range(10000, 10010)), (" 20000-20000 ", range(20000, 20001))],
)
def test_ports_are_low_dash_high_both_included(text: str, ports: range) -> None:
    assert parse_ports(text) == ports


@pytest.mark.parametrize("text", ["", "10000", "10010-10000", "0-10", "1-65536", "a-b", "1-2-3"])
def test_malformed_ports_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="LOW-HIGH"):
        parse_ports(text)


# -- tests/support/launch/ports.py ------------------------------------------------------------


def test_the_tests_name_the_variable_up_reads() -> None:
    assert test_ports.PORTS_ENV == PORTS_ENV


def test_this_worker_draws_from_its_own_part() -> None:
    ours = test_ports.assigned_ports()
    assert ours is not None and os.environ[test_ports.OWN_ENV] == test_ports.show(ours)
    # The processes a test starts draw from the rest of the worker's part:
    # never the port the test picked for the hub it is about to start.
    theirs = test_ports.parse(os.environ[PORTS_ENV])
    # A run's slice (an eighth of the listener ports) over three workers.
    assert theirs.start == ours.stop and len(theirs) >= len(ours) >= 400
    assert set(ours) <= set(test_ports.listener_ports())
    assert ours.stop <= ephemeral_ports().start
    picked = [test_ports.free_port() for _ in range(50)]
    assert set(picked) <= set(ours)
    assert len(set(picked)) == len(picked)  # never the same port twice in one process


def test_the_parts_of_a_range_are_disjoint() -> None:
    run = test_ports.part(test_ports.listener_ports(), 3, test_ports.SLOTS)
    workers = [test_ports.part(run, i, 2) for i in range(2)]
    assert set(workers[0]).isdisjoint(workers[1])
    assert set(workers[0]) | set(workers[1]) <= set(run)
    slots = [test_ports.part(test_ports.listener_ports(), i, 8) for i in range(8)]
    assert sum(len(s) for s in slots) == len(set().union(*map(set, slots)))


def test_concurrent_runs_claim_different_slots(tmp_path: Path) -> None:
    first, first_lock = test_ports.claim_run_ports(tmp_path)
    second, second_lock = test_ports.claim_run_ports(tmp_path)
    assert first_lock is not None and second_lock is not None
    os.close(first_lock)
    os.close(second_lock)
    assert set(first).isdisjoint(second)
    again, lock = test_ports.claim_run_ports(tmp_path)  # a run's end frees its slot
    assert again == first
    assert lock is not None
    os.close(lock)


def test_a_worker_narrows_the_run_range() -> None:
    environ = {PORTS_ENV: "20000-20999"}
    second = test_ports.worker_ports(environ, "gw1", 2)
    assert second == range(20500, 21000)
    assert environ[PORTS_ENV] == "20500-20999"


def test_a_listener_holds_its_address_and_time_wait_does_not() -> None:
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the hub's server
        listener.bind(("127.0.0.1", free_port()))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(PortInUse, match=rf"{address} \(--smtp\) is in use"):
            hold_listeners({"--http": None, "--smtp": address})
        # The server closes an accepted connection first: its side of it, on
        # the listening port, waits in TIME_WAIT, as a stopped hub's do.
        with socket.create_connection(listener.getsockname()) as client:
            accepted, _ = listener.accept()
            accepted.close()
            assert client.recv(1) == b""
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", int(address.rsplit(":", 1)[1])))  # TIME_WAIT is there
    held = hold_listeners({"--http": address, "--smtp": None})  # but up's bind takes the port
    assert list(held) == ["--http"]
    with held["--http"] as sock:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)


def test_holding_fails_whole_and_closes_what_it_bound() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        first = f"127.0.0.1:{free_port()}"
        with pytest.raises(PortInUse):
            hold_listeners({"--http": first, "--smtp": f"127.0.0.1:{taken.getsockname()[1]}"})
    assert port_is_free(int(first.rsplit(":", 1)[1]))  # the --http socket was closed again
    with pytest.raises(ListenerError, match=r"\(--http\) cannot be listened on"):
        hold_listeners({"--http": "192.0.2.1:8470"})  # not this host's address
