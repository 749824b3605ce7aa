"""Sidecars forked from up's fork server, through real `mailrun up` processes:
they process mail, fall asleep and are forked again by the next mail; a
SIGTERM or SIGKILL of one is seen by up, which starts it again; killing the
fork server kills its sidecars, and up starts both again with no mail lost
or processed twice; one that stops answering is replaced; a forked sidecar
has the environment, cwd, umask, limits and files up gives it, and nothing
of the fork server's.
"""

from __future__ import annotations

import os
import secrets
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest

from hub.up.fleet import MISSED_ANSWERS
from runtime.sidecar_contract import (
    DEFAULT_SIDECAR_MAX_FILES,
    FORK_SERVER_MODULE,
)
from tests.e2e.harness import UP_START_TIMEOUT, Up, mailrun_up
from tests.support import command_words, wait_for
from tests.support.launch.starts import SIDECAR_FIRST_MAIL_TIMEOUT

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# What the user's code sees of its process, for each item it handles.
INSPECTOR = """
import os
import resource


def _fds():
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return found


async def main(ctx, item):
    umask = os.umask(0)
    os.umask(umask)
    seen = ctx.state.setdefault("seen", [])
    seen.append({"name": item.subject, "dispatch_id": item.dispatch_id,
                 "pid": os.getpid(), "ppid": os.getppid()})
    ctx.state.update(
        count=len(seen),
        env=dict(os.environ),
        cwd=os.getcwd(),
        umask=umask,
        fds=_fds(),
        nofile=list(resource.getrlimit(resource.RLIMIT_NOFILE)),
    )
"""

OPERATOR_SECRET = "MAILRUN_TEST_OPERATOR_SECRET"


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (its ``SigCgt`` mask)."""
    for line in text(Path(f"/proc/{pid}/status")).splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def text(path: Path) -> str:
    return path.read_text(errors="replace")


def up_log(up: Up) -> str:
    return text(up.state_dir.parent / "up.log")


async def fork_server(up: Up) -> int:
    """The fork server's pid once it serves (it sets its SIGCHLD handler as
    its loop starts). A fork asked earlier waits for its imports, and up
    spawns the sidecar instead past a few seconds: at load 20 the imports
    take longer than that."""
    pid = await up.pid_of("-m", FORK_SERVER_MODULE)
    await wait_for(
        lambda: catches(pid, signal.SIGCHLD), timeout=UP_START_TIMEOUT, what="the fork server"
    )
    return pid


async def mail(up: Up, dep: dict[str, Any], subject: str) -> str:
    r = await up.send(dep["address"], subject, message_id=f"<{subject}.{dep['id']}@test>")
    assert r.status_code == 202, r.text
    return str(r.json()["run_id"])


async def seen(
    up: Up, run_id: str, count: int, timeout: float = SIDECAR_FIRST_MAIL_TIMEOUT
) -> dict[str, Any]:
    run = await up.wait_state(
        run_id, lambda r: r["state"].get("count", 0) >= count, timeout=timeout, what=f"{count}"
    )
    state: dict[str, Any] = run["state"]
    return state


async def new_sidecar(up: Up, dep_id: str, old: int) -> int:
    async def probe() -> int | None:
        found = up.find("sidecar", dep_id)
        return found.pid if found is not None and found.pid != old else None

    return await wait_for(probe, timeout=30, what=f"a new sidecar of {dep_id}")


async def test_a_forked_sidecar_processes_mail_sleeps_and_the_next_mail_forks_it_again(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path, "--idle-stop", "1") as up:
        server = await fork_server(up)
        dep = await up.deploy("sleepy", INSPECTOR)
        first = await up.sidecar_pid(dep["id"])
        assert psutil.Process(first).ppid() == server

        run_id = await mail(up, dep, "one")
        state = await seen(up, run_id, 1)
        assert state["seen"][0]["ppid"] == server
        # Exit code 5: asleep, not a crash (nothing restarts it).
        await wait_for(lambda: up.find("sidecar", dep["id"]) is None, what="asleep")
        assert f"sidecar-{dep['id']} exited" not in up_log(up)

        await mail(up, dep, "two")
        state = await seen(up, run_id, 2)
        woken = state["seen"][1]
        assert woken["pid"] not in (first, state["seen"][0]["pid"])
        assert woken["ppid"] == server  # forked again, by the same fork server
        assert [s["name"] for s in state["seen"]] == ["one", "two"]
        assert len({s["dispatch_id"] for s in state["seen"]}) == 2


async def test_sigkill_and_sigterm_of_a_forked_sidecar_are_seen_and_it_is_forked_again(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path) as up:
        server = await fork_server(up)
        dep = await up.deploy("kept", INSPECTOR)
        first = await up.sidecar_pid(dep["id"])
        run_id = await mail(up, dep, "one")
        await seen(up, run_id, 1)

        os.kill(first, signal.SIGKILL)
        second = await new_sidecar(up, dep["id"], first)
        assert psutil.Process(second).ppid() == server
        assert f"sidecar-{dep['id']} exited with -9" in up_log(up)

        # A clean stop (once it has its handler), still not one up asked for.
        await wait_for(lambda: catches(second, signal.SIGTERM), what="its SIGTERM handler")
        os.kill(second, signal.SIGTERM)
        third = await new_sidecar(up, dep["id"], second)
        assert psutil.Process(third).ppid() == server
        assert f"sidecar-{dep['id']} exited with 0" in up_log(up)

        await mail(up, dep, "two")
        state = await seen(up, run_id, 2)
        assert [(s["name"], s["pid"]) for s in state["seen"]] == [
            ("one", first),
            ("two", third),
        ]


async def test_killing_the_fork_server_kills_its_sidecars_and_up_starts_all_again(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path) as up:
        server = await fork_server(up)
        deps = [await up.deploy(f"d{i}", INSPECTOR) for i in range(2)]
        runs = [await mail(up, dep, "before") for dep in deps]
        for run_id in runs:
            await seen(up, run_id, 1)
        pids = [await up.sidecar_pid(dep["id"]) for dep in deps]
        assert {psutil.Process(pid).ppid() for pid in pids} == {server}

        # Mail in flight while the fork server and its sidecars die.
        for dep in deps:
            await mail(up, dep, "during")
        os.kill(server, signal.SIGKILL)
        await wait_for(lambda: all(gone(pid) for pid in pids), what="its sidecars dead with it")

        def restarted() -> int | None:
            found = up.find("-m", FORK_SERVER_MODULE)
            return found.pid if found is not None and found.pid != server else None

        again = await wait_for(restarted, timeout=30, what="a new fork server")
        assert "fork-server exited with -9" in up_log(up)
        for dep, pid in zip(deps, pids, strict=True):
            await new_sidecar(up, dep["id"], pid)
            assert f"sidecar-{dep['id']} exited with -9" in up_log(up)

        for dep in deps:
            await mail(up, dep, "after")
        for run_id in runs:
            state = await seen(up, run_id, 3)
            assert [s["name"] for s in state["seen"]] == ["before", "during", "after"]
            assert len({s["dispatch_id"] for s in state["seen"]}) == 3
        # Restarted after their backoff: forked by the new fork server, or
        # spawned by up if they came back before it did.
        for dep in deps:
            found = up.find("sidecar", dep["id"])
            assert found is not None and found.ppid() in (again, up.proc.pid)


async def test_a_forked_sidecar_has_what_up_gives_it_and_nothing_of_the_fork_servers(
    tmp_path: Path,
) -> None:
    secret = "op-" + secrets.token_hex(12)
    async with mailrun_up(tmp_path, env={OPERATOR_SECRET: secret}) as up:
        server = psutil.Process(await fork_server(up))
        dep = await up.deploy("inspected", INSPECTOR)
        run_id = await mail(up, dep, "one")
        state = await seen(up, run_id, 1)
        home = up.state_dir / "sidecars" / dep["id"]
        sidecar = psutil.Process(state["seen"][0]["pid"])
        assert sidecar.ppid() == server.pid

        # Its environment is the one up gave it: a sidecar's, HOME its state
        # dir; the operator's secret is neither there nor in the memory it
        # shares with the fork server (whose /proc/PID/environ it shows).
        env = state["env"]
        assert OPERATOR_SECRET not in env and secret not in str(env)
        assert env["HOME"] == str(home)
        assert OPERATOR_SECRET not in server.environ()
        assert OPERATOR_SECRET not in sidecar.environ()
        assert OPERATOR_SECRET in psutil.Process(up.proc.pid).environ()  # it was there
        assert state["cwd"] == str(home) and sidecar.cwd() == str(home)
        assert state["umask"] == 0o077
        assert state["nofile"] == [DEFAULT_SIDECAR_MAX_FILES] * 2

        # Its files: stdin /dev/null, stdout and stderr its own log, and not
        # one of the fork server's (its control socket, its log).
        fds = state["fds"]
        log = str(up.state_dir / "logs" / f"sidecar-{dep['id']}.log")
        assert (fds["0"], fds["1"], fds["2"]) == ("/dev/null", log, log)
        control = server.cmdline()[server.cmdline().index("--control-fd") + 1]
        control_socket = os.readlink(f"/proc/{server.pid}/fd/{control}")
        assert control_socket.startswith("socket:")
        assert control_socket not in fds.values()
        assert str(up.state_dir / "logs" / "fork-server.log") not in fds.values()
        assert "restored" in text(Path(log))


async def test_a_fork_server_that_does_not_answer_costs_a_start_five_seconds_and_no_mail(
    tmp_path: Path,
) -> None:
    async with mailrun_up(tmp_path) as up:
        server = psutil.Process(await fork_server(up))
        server.suspend()  # alive, its socket open, answering nothing
        try:
            dep = await up.deploy("unanswered", INSPECTOR)
            run_id = await mail(up, dep, "one")
            # up waits ANSWER_TIMEOUT for the fork, then spawns the sidecar itself.
            state = await seen(up, run_id, 1)
            spawned = state["seen"][0]["pid"]
            assert psutil.Process(spawned).ppid() == up.proc.pid
            log = up_log(up)
            assert f"sidecar-{dep['id']} spawned: the fork server did not answer" in log
        finally:
            server.resume()
        # The fork server forks what it was asked, in order: once another
        # deployment's sidecar is forked, the late fork of the first was
        # answered, and up killed what it forked.
        other = await up.deploy("answered", INSPECTOR)
        other_pid = await up.sidecar_pid(other["id"])
        assert psutil.Process(other_pid).ppid() == server.pid

        def sidecars_of(dep_id: str) -> list[int]:
            found = []
            for child in up.children():
                try:
                    words = command_words(child)
                    if dep_id in words and child.status() != psutil.STATUS_ZOMBIE:
                        found.append(child.pid)
                except psutil.Error:
                    continue
            return found

        await wait_for(lambda: sidecars_of(dep["id"]) == [spawned], what="one sidecar of it")
        await mail(up, dep, "two")
        state = await seen(up, run_id, 2)
        pids = [(s["name"], s["pid"]) for s in state["seen"]]
        assert pids == [("one", spawned), ("two", spawned)]
        assert f"sidecar-{dep['id']} exited" not in up_log(up)


async def test_a_fork_server_that_misses_answers_in_a_row_is_replaced(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        stuck = psutil.Process(await fork_server(up))
        stuck.suspend()  # alive, its socket open, answering nothing, never resumed
        deps = [await up.deploy(f"s{i}", INSPECTOR) for i in range(MISSED_ANSWERS)]
        runs = [await mail(up, dep, "one") for dep in deps]
        spawned = []
        for dep, run_id in zip(deps, runs, strict=True):
            state = await seen(up, run_id, 1)
            spawned.append(state["seen"][0]["pid"])
            assert psutil.Process(spawned[-1]).ppid() == up.proc.pid
            assert f"sidecar-{dep['id']} spawned: the fork server did not answer" in up_log(up)

        def replaced() -> int | None:
            found = up.find("-m", FORK_SERVER_MODULE)
            return found.pid if found is not None and found.pid != stuck.pid else None

        again = await wait_for(replaced, timeout=30, what="a new fork server")
        await wait_for(lambda: gone(stuck.pid), what="the stuck fork server dead")
        log = up_log(up)
        assert f"the fork server missed {MISSED_ANSWERS} answers in a row: killed" in log
        assert "fork-server exited with -9" in log
        await wait_for(
            lambda: catches(again, signal.SIGCHLD), timeout=UP_START_TIMEOUT, what="it serving"
        )
        # A later start is forked by the new one.
        later = await up.deploy("later", INSPECTOR)
        run_later = await mail(up, later, "one")
        state = await seen(up, run_later, 1)
        assert psutil.Process(state["seen"][0]["pid"]).ppid() == again
        assert f"sidecar-{later['id']} spawned" not in up_log(up)

        # The spawned ones were up's own children: they outlived the stuck
        # fork server and go on, each mail processed once.
        for dep in deps:
            await mail(up, dep, "two")
        for run_id, pid in zip(runs, spawned, strict=True):
            state = await seen(up, run_id, 2)
            assert [(s["name"], s["pid"]) for s in state["seen"]] == [("one", pid), ("two", pid)]
            assert len({s["dispatch_id"] for s in state["seen"]}) == 2


async def test_up_and_its_children_run_nothing_of_the_working_directory(tmp_path: Path) -> None:
    # An operator's project, where `mailrun up` is started: packages of its
    # own named like mailrun's. `python -m hub` would import them first
    # (the working directory heads sys.path) but for up's `-P`.
    project = tmp_path / "project"
    imported = tmp_path / "imported"
    for name in ("hub", "runtime", "sidecar"):
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text(
            f"open({str(imported)!r}, 'a').write({name!r} + '\\n')\n"
            f"raise ImportError('the working directory\\'s {name}')\n"
        )
    async with mailrun_up(tmp_path, "--idle-stop", "1", cwd=project) as up:
        server = await fork_server(up)
        dep = await up.deploy("beside", INSPECTOR)
        run_id = await mail(up, dep, "one")
        state = await seen(up, run_id, 1)
        assert state["seen"][0]["ppid"] == server
        for pid in (await up.hub_pid(), server):
            assert command_words(psutil.Process(pid))[1:3] == ["-P", "-m"]
    assert not imported.exists(), imported.read_text()
