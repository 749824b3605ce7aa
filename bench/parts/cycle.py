"""What one sidecar cycle costs: a frame's arrival through its store, the
handler, the events out and their acknowledgement's mark, counted for lone
mails and for cycles of two (one ``MailBatch`` of two mails).

    .venv/bin/python bench/parts/cycle.py [--cycles 40] [--strace] [--calls] [--cpu]
        [--callgrind] [--only]

SQL, in-process (the Sidecar with the tests' FakeHub on the memory bus,
SQLite's trace callback on the inbox's connection): statements, write
transactions, and those that wait for the disk (not begun at the lazy
``synchronous = 1`` the last such pragma set), per cycle, and the statements by their first
two words; then, untraced, the process's CPU a cycle (the sidecar's, and
the FakeHub's and the memory bus's, the same on any sidecar). With
``--calls``: Python function calls a cycle (``cProfile``, every
resumption of a coroutine counted; the FakeHub's and the memory bus's the
same on any sidecar), a measure the machine's load does not move. With
``--strace``: a real ``python -m sidecar`` on a real nats-server,
``strace -f -c`` over the same cycles (fdatasync, loop wakes, WAL writes,
file locks, futexes, per cycle). With ``--cpu``: a real ``python -m
sidecar`` on a real nats-server, its on-CPU time a cycle, every thread's
(``/proc/PID/task/*/schedstat``, nanoseconds: the sidecar's alone, not the
FakeHub's). With ``--callgrind``: the in-process cycles again (the Sidecar, the
FakeHub and the memory bus, as for the SQL counts) under valgrind's
callgrind, the instructions the process ran a cycle (every thread;
instrumented only over the cycles counted): a count the machine's load
does not move, for changes too small for CPU time to show. (A real
``python -m sidecar`` cannot run under valgrind: valgrind's additions to
its environment make it execute itself again, and again.) ``--only`` skips the
in-process SQL counts. Mails go 20 ms apart, each
once the one before was processed, so every cycle holds one frame's mails.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests.support helpers

from bench.mail.lone_mail import schedstat
from runtime import DispatchProcessed, open_nats
from tests.sidecar.test_process import sidecar_process
from tests.support import running_nats_server, wait_for
from tests.support.harnesses.sidecar import (
    Deployment,
    FakeHub,
    deployed_sidecar,
    fake_hub_on,
    mail,
    make_deployment,
)

SOURCE = """
async def main(ctx, item):
    ctx.state["n"] = ctx.state.get("n", 0) + 1
"""

SYSCALLS = ("fdatasync", "fsync", "epoll_pwait", "epoll_wait", "pwrite64", "fcntl", "futex")


class _Processed:
    """The DispatchProcessed events the hub has, counted as they come: a
    look walks only the events since the last (a walk of them all, every
    poll, was most of the instructions a cycle under callgrind)."""

    def __init__(self, hub: FakeHub) -> None:
        self._hub = hub
        self._walked = len(hub.events)
        self.count = len(hub.of_kind(DispatchProcessed))

    def __call__(self) -> int:
        events = self._hub.events
        fresh = list(itertools.islice(events.values(), self._walked, None))
        self._walked += len(fresh)
        self.count += sum(isinstance(e, DispatchProcessed) for e in fresh)
        return self.count


POLL = 0.02
"""Seconds between looks for a cycle's event."""

SLOW_POLL = 0.25
"""The same where the process's own work is counted (``--calls``,
``--callgrind``): each look is the harness's work, and their number, at
0.02 s, moved with the machine's speed by a tenth of a cycle's count."""


async def _cycles(
    hub: FakeHub, dep: Deployment, seq: int, cycles: int, size: int, poll: float = POLL
) -> int:
    processed = _Processed(hub)
    for _ in range(cycles):
        if size == 1:
            await hub.deliver(mail(dep, seq + 1, "x"))
        else:
            frames = [mail(dep, seq + i, "x") for i in (1, 2)]
            await hub.deliver_batch(frames)
        seq += size
        await wait_for(lambda: processed() == seq, interval=poll)  # noqa: B023
        await anyio.sleep(0.02)
    await anyio.sleep(0.05)
    return seq


async def count_sql(cycles: int) -> None:
    dep = make_deployment(Path(tempfile.mkdtemp(prefix="cycle-")), source=SOURCE)
    async with deployed_sidecar(dep) as (hub, car):
        assert car.inbox is not None
        db = car.inbox.db
        seq = await _cycles(hub, dep, 0, 5, 1)
        for name, size in (("lone mail", 1), ("2-mail cycle", 2)):
            seen: list[str] = []
            await db.read(lambda conn: conn.set_trace_callback(seen.append))  # noqa: B023
            frames = hub.batches
            seq = await _cycles(hub, dep, seq, cycles, size)
            await db.read(lambda conn: conn.set_trace_callback(None))
            begins = [i for i, s in enumerate(seen) if s.startswith("BEGIN")]
            lazy = sum(1 for i in begins if _level_at(seen, i) == "1")
            kinds = Counter(" ".join(s.split()[:2]) for s in seen)
            print(
                f"{name}: {len(seen) / cycles:.1f} statements, {len(begins) / cycles:.2f} write"
                f" transactions, {(len(begins) - lazy) / cycles:.2f} of them durable;"
                f" {(hub.batches - frames) / cycles:.2f} events frames a cycle"
            )
            print("   ", ", ".join(f"{k} {v / cycles:.2f}" for k, v in kinds.most_common()))
        for name, size in (("lone mail", 1), ("2-mail cycle", 2)):
            cpu = time.process_time()
            seq = await _cycles(hub, dep, seq, cycles, size)
            cpu = time.process_time() - cpu
            print(f"{name}: {cpu / cycles * 1000:.2f} ms of the process's CPU a cycle (untraced)")


def _level_at(seen: list[str], i: int) -> str:
    """The sync level statement ``i`` ran at: the last one set before it
    (the connection keeps a level until a use needs another; before the
    first set seen, the durable one)."""
    for s in reversed(seen[:i]):
        if s.startswith("PRAGMA synchronous = "):
            return s.rsplit(" ", 1)[1]
    return "2"


async def count_calls(cycles: int) -> None:
    dep = make_deployment(Path(tempfile.mkdtemp(prefix="cycle-")), source=SOURCE)
    async with deployed_sidecar(dep) as (hub, _):
        seq = await _cycles(hub, dep, 0, 5, 1)
        for name, size in (("lone mail", 1), ("2-mail cycle", 2)):
            profile = cProfile.Profile()
            profile.enable()
            seq = await _cycles(hub, dep, seq, cycles, size, SLOW_POLL)
            profile.disable()
            calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
            print(f"{name}: {calls / cycles:.0f} Python function calls a cycle (cProfile)")


def _strace(pid: int, out: Path) -> subprocess.Popen[bytes]:
    argv = ["strace", "-f", "-c", "-o", str(out), "-p", str(pid)]
    return subprocess.Popen(argv, stderr=subprocess.DEVNULL)


def _stop(tracer: subprocess.Popen[bytes], out: Path) -> dict[str, int]:
    """The calls ``strace -c`` counted, by system call."""
    tracer.send_signal(signal.SIGINT)
    tracer.wait()
    calls: dict[str, int] = {}
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0].replace(".", "").isdigit() and parts[3].isdigit():
            calls[parts[-1]] = int(parts[3])
    return calls


async def _straced(pid: int, out: Path, body: Callable[[], Awaitable[None]]) -> dict[str, int]:
    tracer = _strace(pid, out)
    await anyio.sleep(1.0)  # attached to every thread
    await body()
    return _stop(tracer, out)


@asynccontextmanager
async def real_sidecar(warm: int) -> AsyncIterator[tuple[Any, Any, Any, int, Path]]:
    """A real ``python -m sidecar`` on a real nats-server, welcomed by the
    fake hub and ``warm`` lone cycles in: the hub, the deployment, the
    process, the next seq and a scratch dir. The process is stopped (SIGTERM) on the way out."""
    tmp = Path(tempfile.mkdtemp(prefix="cycle-"))
    with running_nats_server(tmp) as server:
        dep = make_deployment(tmp / "state", source=SOURCE)
        async with (
            open_nats(server.url, name="fake hub") as transport,
            fake_hub_on(transport, dep) as hub,
        ):
            argv = ("--state-dir", str(dep.state_dir), "--nats", server.url)
            with sidecar_process(*argv, log=tmp / "sidecar.log") as proc:
                await wait_for(lambda: len(hub.welcomes) == 1, timeout=10)
                seq = await _cycles(hub, dep, 0, warm, 1)
                yield hub, dep, proc, seq, tmp
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=10)


async def count_syscalls(cycles: int) -> None:
    async with real_sidecar(10) as (hub, dep, proc, seq, tmp):
        for name, size in (("lone mail", 1), ("2-mail cycle", 2)):

            async def run(size: int = size) -> None:
                nonlocal seq
                seq = await _cycles(hub, dep, seq, cycles, size)
                await anyio.sleep(1.0)  # the acknowledgements' marks

            calls = await _straced(proc.pid, tmp / f"{size}.strace", run)
            counted = [f"{k} {calls[k] / cycles:.2f}" for k in SYSCALLS if k in calls]
            print(f"{name} (strace): " + ", ".join(counted))


async def count_cpu(cycles: int) -> None:
    async with real_sidecar(20) as (hub, dep, proc, seq, _):
        for name, size in (("lone mail", 1), ("2-mail cycle", 2)):
            await anyio.sleep(1.0)  # the last acknowledgement's mark
            spent = schedstat(proc.pid)[0]
            seq = await _cycles(hub, dep, seq, cycles, size)
            spent = schedstat(proc.pid)[0] - spent
            print(
                f"{name}: {spent / cycles / 1e6:.3f} ms of the sidecar's CPU a cycle"
                " (schedstat, a real process)"
            )


def _callgrind(*args: str) -> None:
    """``callgrind_control`` on this process (run under callgrind)."""
    subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, capture_output=True)


def _dumps(out: Path) -> set[Path]:
    return set(out.glob("callgrind.*.*"))


def _instructions(out: Path, before: set[Path]) -> int | None:
    """The instructions counted in the dump made since ``before`` was
    listed; None until it is written whole."""
    for dump in _dumps(out) - before:
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                return int(line.split()[1])
    return None


async def count_instructions(cycles: int, out: Path) -> None:
    dep = make_deployment(Path(tempfile.mkdtemp(prefix="cycle-")), source=SOURCE)
    async with deployed_sidecar(dep) as (hub, _):
        seq = await _cycles(hub, dep, 0, 5, 1)
        _callgrind("-i", "on")
        for name, size in (("lone mail", 1), ("2-mail cycle", 2)):
            await anyio.sleep(1.0)  # the last acknowledgement's mark
            dumps = _dumps(out)
            _callgrind("-z")
            seq = await _cycles(hub, dep, seq, cycles, size, SLOW_POLL)
            _callgrind("-d")
            spent = await wait_for(
                lambda: _instructions(out, dumps),  # noqa: B023
                timeout=120,
                what="the dump",
            )
            print(
                f"{name}: {spent / cycles / 1e6:.3f} M instructions of the process a cycle"
                " (callgrind)"
            )


def under_callgrind(cycles: int) -> None:
    """This script again, under callgrind, counting instructions only."""
    out = Path(tempfile.mkdtemp(prefix="cycle-callgrind-"))
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}/callgrind.%p",
        sys.executable,
        __file__,
        "--only",
        "--cycles",
        str(cycles),
        "--callgrind-into",
        str(out),
    ]
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=40, help="cycles counted of each kind")
    parser.add_argument("--strace", action="store_true", help="count a real process's syscalls")
    parser.add_argument("--calls", action="store_true", help="count Python function calls")
    parser.add_argument("--cpu", action="store_true", help="a real sidecar's CPU (schedstat)")
    parser.add_argument(
        "--callgrind", action="store_true", help="a real sidecar's instructions (valgrind)"
    )
    parser.add_argument("--callgrind-into", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--only", action="store_true", help="skip the in-process SQL counts")
    args = parser.parse_args()
    if not args.only:
        anyio.run(count_sql, args.cycles)
    if args.cpu:
        anyio.run(count_cpu, args.cycles)
    if args.callgrind:
        under_callgrind(args.cycles)
    if args.callgrind_into is not None:
        anyio.run(count_instructions, args.cycles, args.callgrind_into)
    if args.calls:
        anyio.run(count_calls, args.cycles)
    if args.strace:
        anyio.run(count_syscalls, args.cycles)


if __name__ == "__main__":
    main()
