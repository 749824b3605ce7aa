"""`mailrun up` and its process machinery (hub/up/processes/children.py), with real processes.

The machinery tests use tiny Python children; the `up` tests run the real
console script with the real hub, sidecars and nats-server.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import urllib.request
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import httpx
import psutil
import pytest

from hub import bind_socket
from hub._errors import HubNotReady, PortInUse
from hub.cli.processes.demo import DemoTimeout, example_source, run_demo
from hub.up import PORTS_ENV, UpSettings, hub_url, parse_ports, run_up
from hub.up.processes import Backoff, Child, ChildSpec, spawn, terminate
from runtime import NATS_URL_ENV
from runtime.sidecar_contract import FORK_SERVER_MODULE
from tests.support import REPO, HubClient, command_words, descendants, free_port, wait_for
from tests.support.launch.ports import assigned_ports
from tests.support.launch.starts import (
    HUB_RESTART_TIMEOUT,
    HUB_START_TIMEOUT,
    UP_START_TIMEOUT,
    started,
)

# slow: every test runs `mailrun up`, the hub or their children as real processes
pytestmark = pytest.mark.slow

PY = sys.executable


def gone(pid: int) -> bool:
    """The process no longer runs (a zombie awaiting its reaper counts as gone)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def py(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


# -- hub/up/processes/children.py ---------------------------------------------------------------


@pytest.mark.anyio
async def test_a_dying_child_is_restarted_with_doubling_backoff(tmp_path: Path) -> None:
    exits: list[tuple[int, float, float]] = []
    child = Child(
        ChildSpec("crasher", py("import sys; sys.exit(3)"), log_path=tmp_path / "c.log"),
        backoff=Backoff(initial=0.05, maximum=0.2, reset_after=10.0),
        on_exit=lambda name, code, delay: exits.append((code, delay, anyio.current_time())),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(child.run)
        await wait_for(lambda: len(exits) >= 5, what="five exits")
        await child.stop()
    assert [code for code, _, _ in exits[:5]] == [3] * 5
    assert [delay for _, delay, _ in exits[:5]] == [0.05, 0.1, 0.2, 0.2, 0.2]
    # Each restart waited its delay: the next exit came no sooner.
    for (_, delay, at), (_, _, next_at) in itertools.pairwise(exits[:5]):
        assert next_at - at >= delay
    assert child.starts >= 5


@pytest.mark.anyio
async def test_a_final_code_counts_only_with_the_processs_note(tmp_path: Path) -> None:
    """A sidecar's workflow may exit with the number that means "do not start
    me again": without the pid note the code is a crash, restarted."""
    note, runs = tmp_path / "final-exit.pid", tmp_path / "runs"
    code = f"""
        import os, pathlib, sys
        p = pathlib.Path({str(runs)!r})
        n = int(p.read_text()) + 1 if p.exists() else 1
        p.write_text(str(n))
        if n == 1:
            pathlib.Path({str(note)!r}).write_text("1")  # another process's pid
        if n == 3:
            pathlib.Path({str(note)!r}).write_text(str(os.getpid()))
        sys.exit(3)
    """
    exits: list[int] = []
    child = Child(
        ChildSpec("noted", py(code), final_codes=frozenset({3}), final_note=note),
        backoff=Backoff(initial=0.01, maximum=0.02),
        on_exit=lambda name, code, delay: exits.append(code),
    )
    with anyio.fail_after(20):
        await child.run()  # ends by itself: the third exit was meant
    assert exits == [3, 3] and child.final_code == 3 and runs.read_text() == "3"


@pytest.mark.anyio
async def test_the_backoff_starts_over_after_the_child_stayed_up(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    code = f"""
        import pathlib, sys, time
        p = pathlib.Path({str(counter)!r})
        n = int(p.read_text()) + 1 if p.exists() else 1
        p.write_text(str(n))
        if n == 3:
            time.sleep(2.0)  # healthy for longer than reset_after
        sys.exit(1)
    """
    delays: list[float] = []
    # reset_after well above a Python start on a loaded machine: the uptime
    # of a child that exits at once includes its interpreter's start.
    child = Child(
        ChildSpec("flaky", py(code)),
        backoff=Backoff(initial=0.05, maximum=1.0, reset_after=1.5),
        on_exit=lambda name, code, delay: delays.append(delay),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(child.run)
        await wait_for(lambda: len(delays) >= 4, what="four exits")
        await child.stop()
    assert delays[:4] == [0.05, 0.1, 0.05, 0.1]


@pytest.mark.anyio
async def test_stop_uses_sigterm_then_sigkill_after_the_grace(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    stubborn = f"""
        import pathlib, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        pathlib.Path({str(ready)!r}).touch()
        time.sleep(60)
    """
    child = Child(ChildSpec("stubborn", py(stubborn)), stop_grace=0.3)
    async with anyio.create_task_group() as tg:
        tg.start_soon(child.run)
        pid = await child.wait_started()
        await wait_for(ready.exists, what="the child ignoring SIGTERM")
        started = anyio.current_time()
        await child.stop()
        assert anyio.current_time() - started >= 0.3
    assert child.handle is not None and child.handle.returncode == -signal.SIGKILL
    assert gone(pid)


@pytest.mark.anyio
async def test_terminate_of_a_polite_child_needs_no_sigkill() -> None:
    proc = spawn(ChildSpec("polite", py("import time; time.sleep(60)")))
    with anyio.fail_after(5):
        code = await terminate(proc, grace=30.0)
    assert code == -signal.SIGTERM


@pytest.mark.anyio
async def test_a_stopped_child_is_not_restarted(tmp_path: Path) -> None:
    child = Child(ChildSpec("sleeper", py("import time; time.sleep(60)")))
    async with anyio.create_task_group() as tg:
        tg.start_soon(child.run)
        pid = await child.wait_started()
        await child.stop()
    assert gone(pid)
    assert child.starts == 1 and child.pid is None


@pytest.mark.anyio
async def test_cancelling_the_caller_does_not_stop_a_child_stop_does() -> None:
    # Shielded: a supervisor decides the order in which its children stop.
    child = Child(ChildSpec("sleeper", py("import time; time.sleep(60)")))
    caller = anyio.CancelScope()

    async def supervise() -> None:
        with caller:
            await child.run()

    async with anyio.create_task_group() as tg:
        tg.start_soon(supervise)
        pid = await child.wait_started()
        caller.cancel()
        # An observation window, not a settle: an unshielded child would be
        # SIGTERMed at its first checkpoint, milliseconds after the cancel.
        await anyio.sleep(0.2)
        assert not gone(pid) and child.pid == pid
        await child.stop()
    assert gone(pid)


@pytest.mark.anyio
async def test_an_unstartable_child_is_retried_not_fatal(tmp_path: Path) -> None:
    exits: list[int] = []
    child = Child(
        ChildSpec("missing", [str(tmp_path / "no-such-binary")]),
        backoff=Backoff(initial=0.01, maximum=0.02),
        on_exit=lambda name, code, delay: exits.append(code),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(child.run)
        await wait_for(lambda: len(exits) >= 2, what="two failed starts")
        await child.stop()
    assert exits[:2] == [127, 127]
    assert child.last_error is not None and "no-such-binary" in child.last_error


PARENT = """
import sys
import anyio
from hub.cli.processes.demo import DemoTimeout, example_source, run_demo
from hub.up.processes import Child, ChildSpec

async def main() -> None:
    child = Child(ChildSpec("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"]))
    async with anyio.create_task_group() as tg:
        tg.start_soon(child.run)
        print(await child.wait_started(), flush=True)
        await anyio.sleep_forever()

anyio.run(main)
"""


def test_children_die_when_their_supervisor_is_sigkilled() -> None:
    parent = subprocess.Popen([PY, "-c", PARENT], cwd=REPO, stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()  # bounded by the test timeout
        child_pid = int(line)
        assert not gone(child_pid)
        parent.kill()
        parent.wait()

        async def check() -> None:
            await wait_for(lambda: gone(child_pid), timeout=5, what="the orphan to die")

        anyio.run(check)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


# -- `mailrun up` as a real process ------------------------------------------------


def mailrun_argv() -> list[str]:
    script = Path(PY).with_name("mailrun")
    return [str(script)] if script.exists() else [PY, "-m", "hub.cli.main"]


class UpProcess:
    """`mailrun up` on free ports in ``tmp``; its output in tmp/up.log."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        self.state = tmp / "state"
        self.http = f"127.0.0.1:{free_port()}"
        self.log_path = tmp / "up.log"
        argv = [*mailrun_argv(), "up", "--state-dir", str(self.state), "--http", self.http]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [*argv, *extra], cwd=REPO, stdout=log, stderr=subprocess.STDOUT
            )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_paths(self) -> list[Path]:
        """up's output and its hub's and nats-server's logs, for failure messages."""
        return [self.log_path, self.state / "logs" / "hub.log", self.state / "logs" / "nats.log"]

    def up_json(self) -> dict[str, object] | None:
        try:
            return dict(json.loads((self.state / "up.json").read_text()))
        except (FileNotFoundError, ValueError):
            return None

    def child(self, *words: str) -> psutil.Process | None:
        """The process of up's (its child, or a sidecar the fork server forked)
        whose command line has all of ``words`` as words."""
        for child in descendants(self.proc.pid):
            try:
                argv = command_words(child)
            except psutil.Error:
                continue
            if all(w in argv for w in words) and child.status() != psutil.STATUS_ZOMBIE:
                return child
        return None

    def bearer(self) -> dict[str, str]:
        """The admin token's header (up creates the token before its hub starts)."""
        token = (self.state / "admin-token").read_text().strip()
        return {"Authorization": f"Bearer {token}"}

    def health(self) -> dict[str, object] | None:
        try:
            request = urllib.request.Request(f"http://{self.http}/healthz", headers=self.bearer())
            with urllib.request.urlopen(request, timeout=2) as resp:
                return dict(json.loads(resp.read()))
        except OSError:
            return None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    proc = UpProcess(tmp_path)
    try:
        yield proc
    finally:
        proc.close()


async def ready(up: UpProcess) -> dict[str, object]:
    info = await started(
        up.up_json, exit_code=up.proc.poll, logs=up.log_paths(), timeout=UP_START_TIMEOUT,
        what="up.json",
    )  # fmt: skip
    assert await wait_for(up.health, what="/healthz")
    return info


@pytest.mark.anyio
async def test_up_runs_nats_and_the_hub_and_stops_them_on_sigterm(up: UpProcess) -> None:
    info = await ready(up)
    assert info["pid"] == up.proc.pid
    assert info["http"] == f"http://{up.http}"
    health = up.health()
    assert health is not None and health["nats_url"] == info["nats_url"]
    # Its own nats-server on a port of the worker's children (MAILRUN_PORTS:
    # tests/conftest.py), none of the test's own, where its HTTP port is.
    theirs, ours = parse_ports(os.environ[PORTS_ENV]), assigned_ports()
    nats_port = int(str(info["nats_url"]).rsplit(":", 1)[1])
    assert ours is not None and nats_port in theirs and nats_port not in ours
    # up.json is written before the line is printed: wait for it.
    line = f"mailrun up: hub http://{up.http} nats {info['nats_url']} state {up.state}"
    await wait_for(lambda: line in up.log, what="up's first line")
    hub = up.child("-m", "hub")
    assert hub is not None
    assert hub.cmdline()[-6:-1] == [
        "--state-dir",
        str(up.state),
        "--sidecar-root",
        str(up.state / "sidecars"),
        "--http-fd",
    ]
    port = int(up.http.rsplit(":", 1)[1])

    def listening_fds(process: psutil.Process) -> list[int]:
        return [
            c.fd
            for c in process.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        ]

    assert listening_fds(psutil.Process(up.proc.pid))  # up holds the hub's socket
    assert listening_fds(hub) == [int(hub.cmdline()[-1])]  # and its hub serves on it
    # The NATS URL (which may hold a password) is in its environment instead.
    assert hub.environ()[NATS_URL_ENV] == info["nats_url"]
    nats = await wait_for(
        lambda: next(
            (c for c in psutil.Process(up.proc.pid).children() if "nats-server" in c.name()), None
        ),
        what="the nats-server child",
    )
    pids = [hub.pid, nats.pid]

    up.proc.send_signal(signal.SIGTERM)
    await wait_for(lambda: up.proc.poll() is not None, what="up to exit")
    assert up.proc.returncode == 0
    assert all(gone(pid) for pid in pids)
    assert up.up_json() is None
    assert (up.state / "logs" / "hub.log").stat().st_size > 0
    assert (up.state / "logs" / "nats.log").stat().st_size > 0


@pytest.mark.anyio
async def test_up_restarts_a_killed_hub(up: UpProcess) -> None:
    await ready(up)
    health = up.health()
    assert health is not None
    hub = up.child("-m", "hub")
    assert hub is not None
    hub.kill()

    def new_boot() -> dict[str, object] | None:
        now = up.health()
        return now if now is not None and now["boot_id"] != health["boot_id"] else None

    await started(
        new_boot, exit_code=up.proc.poll, logs=up.log_paths(), timeout=HUB_RESTART_TIMEOUT,
        what="a restarted hub",
    )  # fmt: skip
    restarted = up.child("-m", "hub")
    assert restarted is not None and restarted.pid != hub.pid
    assert "mailrun up: hub exited with -9" in up.log


@pytest.mark.anyio
async def test_sigkill_of_up_takes_every_child_down(up: UpProcess) -> None:
    await ready(up)
    # nats-server, the hub and the fork server (sidecars are forked from it),
    # which is started as up.json is written.
    await wait_for(lambda: up.child("-m", FORK_SERVER_MODULE), what="the fork server")
    children = psutil.Process(up.proc.pid).children()
    assert len(children) == 3
    up.proc.kill()
    up.proc.wait()
    pids = [child.pid for child in children]
    await wait_for(lambda: all(gone(pid) for pid in pids), what="every child to die")


@pytest.mark.anyio
async def test_a_second_up_on_the_same_state_dir_is_refused(up: UpProcess) -> None:
    await ready(up)
    argv = [*mailrun_argv(), "up", "--state-dir", str(up.state)]
    second = await anyio.run_process(
        [*argv, "--http", f"127.0.0.1:{free_port()}"], cwd=REPO, check=False
    )
    assert second.returncode == 1
    assert "error: up_already_running" in second.stderr.decode()
    assert up.health() is not None  # the first one is untouched


@pytest.mark.parametrize("via", ["option", "environment"])
def test_up_takes_its_ports_from_ports_or_the_environment(tmp_path: Path, via: str) -> None:
    with socket.socket() as taken:  # the one port it may take is busy: it says so, and stops
        taken.bind(("127.0.0.1", free_port()))
        port = taken.getsockname()[1]
        argv = [*mailrun_argv(), "up", "--state-dir", str(tmp_path / "state")]
        argv += ["--http", f"127.0.0.1:{free_port()}"]
        env = {**os.environ, PORTS_ENV: f"{port}-{port}"}
        if via == "option":
            argv += ["--ports", f"{port}-{port}"]
            env[PORTS_ENV] = "1-0"  # the option wins; unread
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: no_free_port: no port of {port}-{port} is free" in done.stderr
    assert psutil.Process().children() == []


@pytest.mark.parametrize("option", ["--http", "--smtp"])
def test_up_refuses_an_address_another_process_listens_on(tmp_path: Path, option: str) -> None:
    # Started anyway, its hub would fail to bind and be restarted for ever,
    # while the other process answered the hub's clients in its place.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        argv = [*mailrun_argv(), "up", "--state-dir", str(tmp_path / "state")]
        argv += ["--http", f"127.0.0.1:{free_port()}", option, address]
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"error: port_in_use: {address} ({option}) is in use" in done.stderr
    assert psutil.Process().children() == []
    assert list((tmp_path / "state" / "logs").iterdir()) == []  # nothing was started


def test_up_refuses_malformed_ports(tmp_path: Path) -> None:
    argv = [*mailrun_argv(), "up", "--state-dir", str(tmp_path / "state"), "--ports", "9-1"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Invalid value for '--ports'" in done.stderr
    assert not (tmp_path / "state").exists()


async def deploy_counter(up: UpProcess, name: str = "counter") -> dict[str, Any]:
    token_file = up.state / "admin-token"
    async with aclosing(HubClient(f"http://{up.http}", timeout=10, token_file=token_file)) as hub:
        return dict(await hub.deploy(name, example_source(), "counter:main"))


@pytest.mark.anyio
async def test_up_keeps_one_sidecar_per_live_deployment(up: UpProcess) -> None:
    info = await ready(up)
    dep = await deploy_counter(up)
    sidecar = await wait_for(lambda: up.child("sidecar", dep["id"]), what="the sidecar")
    state = up.state / "sidecars" / dep["id"]
    assert command_words(sidecar)[1:] == [
        "-P",  # the working directory off sys.path
        "-m",
        "sidecar",
        "--state-dir",
        str(state),
        "--deployment",
        dep["id"],
        "--idle-stop",  # up's default idle time: scale to zero
        "300",
    ]
    assert sidecar.environ()[NATS_URL_ENV] == info["nats_url"]

    # Up spells the argv as the sidecar would itself: it serves without
    # executing itself again (a second interpreter boot on every start and wake).
    token_file = up.state / "admin-token"
    async with aclosing(HubClient(f"http://{up.http}", timeout=10, token_file=token_file)) as hub:

        async def connected() -> bool:
            answer = await hub.http.get(f"/workflows/deployments/{dep['id']}")
            return bool(answer.json().get("connected"))

        await wait_for(connected, what="the sidecar's session")
    assert command_words(sidecar)[-2:] == ["--idle-stop", "300"]

    # Killed alone, it is restarted.
    sidecar.kill()

    def restarted() -> psutil.Process | None:
        again = up.child("sidecar", dep["id"])
        return again if again is not None and again.pid != sidecar.pid else None

    again = await wait_for(restarted, what="the restarted sidecar")
    assert f"mailrun up: sidecar-{dep['id']} exited with -9" in up.log

    # Deleted, its sidecar is stopped and not started again.
    async with httpx.AsyncClient(
        base_url=f"http://{up.http}", timeout=10, headers=up.bearer()
    ) as client:
        r = await client.delete(f"/workflows/deployments/{dep['id']}")
        assert r.status_code == 200, r.text
    await wait_for(lambda: gone(again.pid), timeout=15, what="the deleted deployment's sidecar")
    assert up.child("sidecar", dep["id"]) is None
    # The listing showed it deleted: its directory (its key, its mail) goes.
    await wait_for(lambda: not state.exists(), timeout=15, what="its sidecar directory removed")
    assert up.child("-m", "hub") is not None


@pytest.mark.anyio
async def test_sidecars_keep_running_while_the_hub_is_down(up: UpProcess) -> None:
    await ready(up)
    dep = await deploy_counter(up)
    sidecar = await wait_for(lambda: up.child("sidecar", dep["id"]), what="the sidecar")
    hub = up.child("-m", "hub")
    assert hub is not None
    hub.kill()

    def new_hub() -> psutil.Process | None:
        now = up.child("-m", "hub")
        return now if now is not None and now.pid != hub.pid else None

    await started(
        new_hub, exit_code=up.proc.poll, logs=up.log_paths(), timeout=HUB_RESTART_TIMEOUT,
        what="a restarted hub",
    )  # fmt: skip
    await started(
        up.health, exit_code=up.proc.poll, logs=up.log_paths(), timeout=HUB_START_TIMEOUT,
        what="the restarted hub's /healthz",
    )  # fmt: skip
    assert up.child("sidecar", dep["id"]) is not None
    assert up.child("sidecar", dep["id"]).pid == sidecar.pid  # type: ignore[union-attr]


def test_demo_runs_the_example_end_to_end(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [*mailrun_argv(), "demo"], cwd=REPO, env=env, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    progress = [ln for ln in lines if ln.startswith("mailrun demo: processed ")]
    assert [ln.split()[3] for ln in progress] == ["1", "2", "3", "4"]
    assert lines[-1].endswith(
        'completed with {"count":4,"subjects":["hello","how are you","one more","stop"]}'
    )
    assert list(tmp_path.iterdir()) == []  # its temporary state dir is gone


@pytest.mark.parametrize(
    ("listen", "url"),
    [
        ("127.0.0.1:8470", "http://127.0.0.1:8470"),
        ("0.0.0.0:8470", "http://127.0.0.1:8470"),
        ("[::]:8470", "http://[::1]:8470"),
        ("hub.internal:80", "http://hub.internal:80"),
    ],
)
def test_up_reaches_a_wildcard_listener_on_loopback(listen: str, url: str) -> None:
    assert hub_url(listen) == url


def test_demo_past_its_deadline_fails_clearly_and_keeps_its_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    said: list[str] = []
    with pytest.raises(DemoTimeout) as caught:
        anyio.run(functools.partial(run_demo, said.append, environ=os.environ, deadline=0.5))
    (kept,) = tmp_path.iterdir()
    assert f"no result within 0.5 s; logs in {kept / 'state' / 'logs'}" in str(caught.value)
    assert (kept / "state" / "logs").is_dir()
    assert psutil.Process().children() == []  # whatever it had started is stopped


def up_whose_hub_starts_with(
    tmp_path: Path, sitecustomize: str, hub_ready_timeout: float, **options: Any
) -> UpSettings:
    """up's settings, on free ports, with ``sitecustomize`` run first by its
    hub: this up's only Python child before the hub answers."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(sitecustomize)
    return UpSettings(
        tmp_path / "state",
        http=f"127.0.0.1:{free_port()}",
        nats_port=free_port(),
        hub_ready_timeout=hub_ready_timeout,
        stop_grace=1.0,
        environ={**os.environ, "PYTHONPATH": str(site)},
        **options,
    )


@pytest.mark.anyio
async def test_up_says_what_its_hub_said_last_when_it_exited(tmp_path: Path) -> None:
    # The hub exits at its start with a line on stderr, as a hub that fails does.
    said: list[str] = []
    exits_at_start = "raise SystemExit('no hub can start here')\n"
    config = up_whose_hub_starts_with(tmp_path, exits_at_start, 3.0, say=said.append)
    with pytest.raises(HubNotReady):
        await run_up(config)
    exits = [line for line in said if "mailrun up: hub exited with 1" in line]
    assert exits, said
    log = tmp_path / "state" / "logs" / "hub.log"
    assert all(
        f"(log {log}): SystemExit: no hub can start here; restarting" in line for line in exits
    )


@pytest.mark.anyio
async def test_up_gives_up_on_a_hub_that_never_answers(tmp_path: Path) -> None:
    # The hub stops at its start and waits for a signal: it never answers.
    config = up_whose_hub_starts_with(tmp_path, "import signal\nsignal.pause()\n", 1.0)
    with pytest.raises(HubNotReady, match=r"did not answer .*/healthz within 1 s"):
        await run_up(config)
    assert psutil.Process().children() == []  # nats-server and the hub are stopped


@pytest.mark.anyio
async def test_the_hub_port_stays_held_while_the_hub_restarts_and_its_clients_wait(
    tmp_path: Path,
) -> None:
    # Each hub start leaves a mark; the second blocks at its start on a FIFO
    # until the test opens it, so "the hub is down" lasts as long as it must.
    starts, gate = tmp_path / "starts", tmp_path / "gate"
    starts.mkdir()
    os.mkfifo(gate)
    hold_second = textwrap.dedent(f"""\
        import os, pathlib
        if b"\\0-m\\0hub\\0" in pathlib.Path("/proc/self/cmdline").read_bytes():
            starts = pathlib.Path({str(starts)!r})
            n = len(os.listdir(starts))
            (starts / str(n)).touch()
            if n == 1:
                open({str(gate)!r}).read()
        """)
    config = up_whose_hub_starts_with(tmp_path, hold_second, HUB_START_TIMEOUT)
    host, port = config.http.rsplit(":", 1)[0], int(config.http.rsplit(":", 1)[1])
    async with anyio.create_task_group() as tg:
        info = await tg.start(run_up, config)
        auth = f"Bearer {info.admin_token}"
        async with httpx.AsyncClient(
            base_url=info.http, timeout=30, headers={"Authorization": auth}
        ) as client:
            before = (await client.get("/healthz")).json()["boot_id"]
            [hub] = [p for p in psutil.Process().children() if "hub" in p.cmdline()[1:4]]
            hub.kill()
            await wait_for(lambda: (starts / "1").exists(), what="the second hub's start")
            # Down: no hub process listens, and still no other process gets the port.
            assert not hub.is_running()
            with pytest.raises(PortInUse):
                bind_socket(host, port).close()
            # A client connects now (the kernel queues it) and asks; the next
            # hub, once it starts, answers it.
            async with await anyio.connect_tcp(host, port) as stream:
                head = f"GET /healthz HTTP/1.1\r\nHost: h\r\nAuthorization: {auth}\r\n"
                await stream.send(f"{head}Connection: close\r\n\r\n".encode())
                await anyio.to_thread.run_sync(lambda: open(gate, "w").close())
                reply = b""
                with contextlib.suppress(anyio.EndOfStream):
                    while True:
                        reply += await stream.receive()
            assert reply.startswith(b"HTTP/1.1 200 "), reply
            after = json.loads(reply.partition(b"\r\n\r\n")[2])["boot_id"]
            assert after != before  # the next hub's answer
        tg.cancel_scope.cancel()
