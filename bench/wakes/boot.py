"""What a sidecar's start costs: an asleep deployment's sidecar started the way
`mailrun up` starts it, again and again, under a real hub and nats-server.

    .venv/bin/python bench/wakes/boot.py [--starts 10] [--idle-stop 0.5] [--keep] [--json]
        [--python-options '-X importtime'] [--code DIR] [--start exec|fork] [--lines N]
        [--profile DIR]

Starts nats-server and a hub (``python -m hub --sidecar-root``), deploys a
workflow whose handler records, for each mail, the wall clock and its own
process's CPU time (``time.process_time()``: user and system, every
thread) as it runs, and lets the deployment's first sidecar boot, handle a
mail and fall asleep (``--idle-stop``). Then, ``--starts`` times: mails the
asleep deployment, starts its sidecar with ``up``'s command line and
environment (``sidecar_argv``, ``sidecar_env``, its state dir as cwd), and
waits for it to handle the mail and fall asleep again. Of each start:

- wall time from the spawn to its log's "restored" line (inbox open, runs
  restored), to its "session" line (welcomed by the hub) and to the
  handler's call on the mail (the log's lines are timed as this script
  reads them, the call by the handler itself: on a loaded machine the
  welcome's line can be read after the call);
- CPU of the sidecar process up to that call, and over its whole life
  (the kernel's rusage of the child once it exited: the start, the mail,
  the idle time, the Sleep and the stop).

Prints the median and p90 of each. ``--python-options`` adds interpreter
options to the sidecar's command line (``-X importtime``, say; each start's
log stays in the scratch dir with ``--keep``); ``--code`` runs the
sidecar from another checkout (``git archive`` of an earlier commit, say),
the hub from this one. ``--start fork`` forks each sidecar from a fork
server started once (``python -m sidecar.forking``, as ``up --sidecar-start
fork`` does; its log is a pipe the bench reads, its exit status the one the
fork server relays); its whole-life CPU is then the growth of the fork
server's reaped children's times (clock ticks: 10 ms steps), its CPU to the
handler exact (a fork starts the child's times at zero). ``--lines N``
grows the workflow's one module by about N lines of helper functions (a
workflow of some size: its sources are laid out and imported at every
start). With ``--start fork`` a ``sitecustomize`` in the fork server
(``INSIDE``) has each forked sidecar write its own rusage as it leaves
through ``os._exit`` (a fork starts it at zero): its user and system CPU,
minor page faults and context switches, exact where the reaped times step
by ticks, printed as means over the starts; ``--profile DIR`` also profiles
each life with cProfile on process CPU time from the fork on (dumped to
``DIR/<pid>.prof``, its Python calls printed; the profiler's cost then
counts in the CPU).
Exits 1 unless every start handled its mail exactly once and fell asleep.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import shlex
import socket
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests' helpers

from bench.mail.bench_e2e import keep_and_json, percentile, run_in_scratch
from runtime import NATS_URL_ENV, SidecarExit, record_path, sidecar_env
from runtime.sidecar_contract import (
    FORK_MAX_FRAME,
    FORK_SERVER_MODULE,
    FORK_TITLE_ROOM,
    Exited,
    Fork,
    Forked,
    decode_answer,
    encode_frame,
    sidecar_argv,
)
from tests.faults.harness.cluster import Proc
from tests.support import REPO, HubClient, NatsServerProcess, free_port, wait_for

STAMP = """
import time


async def main(ctx, item):
    seen = ctx.state.setdefault("seen", {})
    if item.subject in seen:
        ctx.state["twice"] = ctx.state.get("twice", 0) + 1
    seen[item.subject] = [time.time(), time.process_time()]
"""


def helpers(lines: int) -> str:
    """About ``lines`` lines of functions the handler never calls."""
    body = []
    for k in range(lines // 6):
        body += [
            f"def step_{k}(item, state):",
            f"    value = state.get('k{k}', 0) + {k}",
            "    if value % 3 == 0:",
            "        return {'value': value, 'subject': getattr(item, 'subject', '')}",
            "    return value",
            "",
        ]
    return "\n\n" + "\n".join(body)


INSIDE = """
import cProfile
import json
import os
import resource
import time

_DIR = os.environ.pop("MAILRUN_BOOT_INSIDE")
_PROFILE = os.environ.pop("MAILRUN_BOOT_PROFILE", "") == "1"


def _inside_child():
    profile = cProfile.Profile(time.process_time) if _PROFILE else None
    leave = os._exit

    def _exit(code):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        if profile is not None:
            profile.disable()
            profile.dump_stats(os.path.join(_DIR, f"{os.getpid()}.prof"))
        with open(os.path.join(_DIR, f"{os.getpid()}.json"), "w") as out:
            json.dump({
                "user": usage.ru_utime, "system": usage.ru_stime, "minflt": usage.ru_minflt,
                "nvcsw": usage.ru_nvcsw, "nivcsw": usage.ru_nivcsw,
            }, out)
        leave(code)

    os._exit = _exit
    if profile is not None:
        profile.enable()


os.register_at_fork(after_in_child=_inside_child)
"""
"""The fork server's ``sitecustomize`` (``--start fork``): each forked
sidecar's own rusage at its ``os._exit`` (a fork starts it at zero), and its
cProfile with ``--profile``."""

RESTORED = " restored (instance "
WELCOMED = "mailrun.sidecar.link: session "


@dataclass
class Start:
    """One start of the sidecar: when its milestones came, what it cost."""

    spawned: float
    restored: float | None = None
    welcomed: float | None = None
    handled: float | None = None
    cpu_handled: float | None = None
    cpu_life: float | None = None
    cpu_life_system: float | None = None
    exit_code: int | None = None
    once: bool = False
    log: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, float | None]:
        def since(at: float | None) -> float | None:
            return None if at is None else at - self.spawned

        return {
            "to_restored": since(self.restored),
            "to_welcomed": since(self.welcomed),
            "to_handled": since(self.handled),
            "cpu_to_handled": self.cpu_handled,
            "cpu_life": self.cpu_life,
        }


def sidecar_command(state: Path, dep: str, idle_stop: float, options: list[str]) -> list[str]:
    """``up``'s command line for the sidecar of ``dep``, with ``options`` for the interpreter."""
    return [
        sys.executable,
        *options,
        "-m",
        "sidecar",
        *sidecar_argv(state, dep, idle_stop=idle_stop),
    ]


def up_environment(nats_url: str, code: Path) -> dict[str, str]:
    """What ``up`` hands its children (hub/up/config/host.py ``child_env``) before a
    sidecar's is cut down from it: the checkout (``code``) on the path, unbuffered."""
    paths = [str(code), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(paths),
        NATS_URL_ENV: nats_url,
    }


class ForkServer:
    """A fork server of the bench's own, spoken to in its frames, one start at a time."""

    def __init__(self, env: dict[str, str], cwd: Path, log: Path) -> None:
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-m", FORK_SERVER_MODULE, "--control-fd", str(theirs.fileno())]
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*argv, "--room", " " * FORK_TITLE_ROOM], env=env, cwd=cwd,
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        theirs.close()

    def fork(self, argv: list[str], env: dict[str, str], cwd: Path, log_fd: int) -> int:
        socket.send_fds(self.sock, [encode_frame(Fork(0, argv, env, str(cwd)))], [log_fd])
        answer = decode_answer(self.sock.recv(FORK_MAX_FRAME))
        assert isinstance(answer, Forked), answer
        return answer.pid

    def exited(self) -> int:
        answer = decode_answer(self.sock.recv(FORK_MAX_FRAME))
        assert isinstance(answer, Exited), answer
        return answer.returncode

    def reaped_cpu(self) -> tuple[float, float]:
        """The reaped children's CPU, user and system."""
        times = psutil.Process(self.proc.pid).cpu_times()
        return float(times.children_user), float(times.children_system)

    def stop(self) -> None:
        self.sock.close()  # its end: it exits
        self.proc.wait(timeout=30)


async def read_log(stream: IO[bytes], start: Start, sink: IO[bytes]) -> None:
    """The sidecar's log, line by line as it comes, each milestone's line timed."""
    while line := await anyio.to_thread.run_sync(stream.readline):
        at = time.time()
        sink.write(line)
        text = line.decode(errors="replace")
        if start.restored is None and RESTORED in text:
            start.restored = at
        elif start.welcomed is None and WELCOMED in text:
            start.welcomed = at


async def boot_once(
    hub: HubClient, dep: dict[str, Any], state: Path, args: argparse.Namespace, n: int, logs: Path
) -> Start:
    """Mail the asleep deployment, start its sidecar, and wait until it handled
    the mail and exited asleep."""
    subject = f"boot{n:04d}"
    sent = await hub.send(dep["address"], subject)
    assert sent.status_code == 202, sent.text
    run_id = sent.json()["run_id"]
    env = sidecar_env(up_environment(args.nats_url, args.code), home=state)
    if args.fork_server is not None:
        start = await fork_once(
            args.fork_server, env, state, dep, args, logs / f"sidecar-{n:04d}.log"
        )
    else:
        start = await spawn_once(env, state, dep, args, logs / f"sidecar-{n:04d}.log")
    run = await hub.run(run_id)
    state_of = run.get("state") or {}
    stamp = state_of.get("seen", {}).get(subject)
    if stamp is not None:
        start.handled, start.cpu_handled = stamp
    # The mails may share a run: a second call on any of them counts in "twice".
    start.once = stamp is not None and not state_of.get("twice")
    return start


async def fork_once(
    server: ForkServer,
    env: dict[str, str],
    state: Path,
    dep: dict[str, Any],
    args: argparse.Namespace,
    log: Path,
) -> Start:
    """Start the sidecar through the fork server; its log comes through a pipe."""
    reaped = server.reaped_cpu()
    read_end, write_end = os.pipe()
    start = Start(spawned=time.time())
    try:
        argv = sidecar_argv(state, dep["id"], idle_stop=args.idle_stop)
        await anyio.to_thread.run_sync(server.fork, argv, env, state, write_end)
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as stream, log.open("wb") as sink:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_log, stream, start, sink)
                start.exit_code = await anyio.to_thread.run_sync(server.exited)
    user, system = server.reaped_cpu()
    start.cpu_life = user + system - sum(reaped)
    start.cpu_life_system = system - reaped[1]
    return start


async def spawn_once(
    env: dict[str, str], state: Path, dep: dict[str, Any], args: argparse.Namespace, log: Path
) -> Start:
    """Start the sidecar as ``up --sidecar-start exec`` does, reaped here for its rusage."""
    argv = sidecar_command(state, dep["id"], args.idle_stop, args.python_options)
    start = Start(spawned=time.time())
    # A plain Popen, reaped below by os.wait4 for the child's rusage (anyio's
    # process would reap it first); spawning does not block for long.
    proc = subprocess.Popen(  # noqa: ASYNC220
        argv, env=env, cwd=state, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    with log.open("wb") as sink:
        try:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(read_log, proc.stderr, start, sink)
                    # The kernel's rusage of the child as it is reaped: Popen's
                    # own wait keeps only the status.
                    _, status, usage = await anyio.to_thread.run_sync(
                        os.wait4, proc.pid, 0, abandon_on_cancel=True
                    )
        finally:
            if start.exit_code is None and proc.returncode is None:
                proc.kill()  # a start that hung: its log says where
        proc.returncode = start.exit_code = os.waitstatus_to_exitcode(status)
        proc.stderr.close()
    start.cpu_life = usage.ru_utime + usage.ru_stime
    start.cpu_life_system = usage.ru_stime
    return start


async def asleep(hub: HubClient, dep_id: str) -> bool:
    r = await hub.http.get("/workflows/deployments")
    assert r.status_code == 200, r.text
    return any(
        d.get("id") == dep_id and d.get("status") == "asleep" for d in r.json()["deployments"]
    )


def inside_env(env: dict[str, str], inside: Path, tmp: Path, profile: bool) -> dict[str, str]:
    """The fork server's environment: its ``sitecustomize`` first on the path,
    which writes each life's figures into ``inside``."""
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(INSIDE)
    inside.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return {
        "PYTHONPATH": path,
        "MAILRUN_BOOT_INSIDE": str(inside.absolute()),
        "MAILRUN_BOOT_PROFILE": "1" if profile else "0",
    }


def lives(inside: Path) -> dict[str, float]:
    """Each forked life's own rusage, the mean over the lives (and with
    ``--profile`` its Python calls)."""
    usages = [json.loads(path.read_text()) for path in inside.glob("*.json")]
    n = max(1, len(usages))
    figures = {
        "lives": len(usages),
        "user_ms": round(sum(u["user"] for u in usages) / n * 1000, 2),
        "system_ms": round(sum(u["system"] for u in usages) / n * 1000, 2),
        "minor_faults": round(sum(u["minflt"] for u in usages) / n),
        "context_switches": round(sum(u["nvcsw"] + u["nivcsw"] for u in usages) / n),
    }
    profiles = [pstats.Stats(str(path)) for path in inside.glob("*.prof")]
    if profiles:
        total = sum(s.total_calls for s in profiles)  # type: ignore[attr-defined]
        figures["python_calls"] = round(total / len(profiles))
    return figures


def spread(values: list[float]) -> dict[str, float]:
    """Median and p90 (nearest rank) of ``values`` (seconds), in milliseconds."""
    ordered = sorted(values)
    return {
        "p50_ms": round(percentile(ordered, 0.50) * 1000, 1),
        "p90_ms": round(percentile(ordered, 0.90) * 1000, 1),
    }


async def bench(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    token = tmp / "admin-token"
    token.write_text("b" * 43 + "\n")
    token.chmod(0o600)
    nats = NatsServerProcess(log_file=tmp / "nats.log")
    args.nats_url = nats.url
    root = tmp / "sidecars"
    http = f"127.0.0.1:{free_port()}"
    hub_argv = [
        sys.executable, "-m", "hub", "--state-dir", str(tmp / "hub"), "--http", http,
        "--nats", nats.url, "--sidecar-root", str(root), "--token-file", str(token),
    ]  # fmt: skip
    logs = tmp / "logs"
    logs.mkdir()
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(nats)
        hub_proc = Proc("hub", hub_argv, tmp / "hub.log")
        stack.push_async_callback(hub_proc.stop)
        hub_proc.start()
        hub = HubClient(f"http://{http}", timeout=30, token_file=token)
        stack.push_async_callback(hub.aclose)
        await wait_for(hub.healthz, timeout=60, what="the hub")
        dep = await hub.deploy("boot", STAMP + helpers(args.lines))
        state = root / dep["id"]
        args.fork_server = None
        if args.start == "fork":
            env = sidecar_env(up_environment(args.nats_url, args.code), home=root)
            args.inside = args.profile or tmp / "inside"
            env.update(inside_env(env, args.inside, tmp, args.profile is not None))
            args.fork_server = ForkServer(env, root, tmp / "fork-server.log")
            stack.callback(args.fork_server.stop)
        await wait_for(lambda: record_path(state, dep["id"]).exists(), what="the restore record")
        # The deployment's first start (its inbox created, its sources
        # written) is not a wake: it is shown apart.
        first = await boot_once(hub, dep, state, args, 0, logs)
        await wait_for(lambda: asleep(hub, dep["id"]), timeout=30, what="the deployment asleep")
        if args.start == "fork":  # the first start is not a wake
            for path in [*args.inside.glob("*.prof"), *args.inside.glob("*.json")]:
                path.unlink()
        starts = []
        for n in range(1, args.starts + 1):
            starts.append(await boot_once(hub, dep, state, args, n, logs))
    ok = all(s.once and s.exit_code == SidecarExit.ASLEEP for s in [first, *starts])
    per_start = [s.figures() for s in starts]
    n = max(1, len(starts))
    return {
        "starts": len(starts),
        "idle_stop_s": args.idle_stop,
        "start": args.start,
        "python_options": args.python_options,
        "first_start": {
            k: None if v is None else round(v * 1000, 1) for k, v in first.figures().items()
        },
        "wall": {
            name: spread([v for f in per_start if (v := f[name]) is not None])
            for name in ("to_restored", "to_welcomed", "to_handled")
        },
        "cpu": {
            name: spread([v for f in per_start if (v := f[name]) is not None])
            for name in ("cpu_to_handled", "cpu_life")
        },
        "cpu_life_mean_ms": round(sum(s.cpu_life or 0.0 for s in starts) / n * 1000, 1),
        "cpu_life_system_mean_ms": round(
            sum(s.cpu_life_system or 0.0 for s in starts) / n * 1000, 1
        ),
        "lives": lives(args.inside) if args.start == "fork" else None,
        "exit_codes": [s.exit_code for s in [first, *starts]],
        "handled_once": [s.once for s in [first, *starts]],
        "exactly_once": ok,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--starts", type=int, default=10, help="starts measured (after the first)")
    p.add_argument(
        "--idle-stop", type=float, default=0.5, help="the sidecar's --idle-stop (seconds)"
    )
    p.add_argument(
        "--python-options",
        type=shlex.split,
        default=[],
        metavar="OPTIONS",
        help="interpreter options for the sidecar, as one string ('-X importtime', say)",
    )
    p.add_argument(
        "--code",
        type=Path,
        default=REPO,
        metavar="DIR",
        help="the checkout the sidecar runs (default this one): another release's, to compare",
    )
    p.add_argument(
        "--start",
        choices=("exec", "fork"),
        default="exec",
        help="exec: each sidecar a `python -m sidecar` (default); fork: forked from a fork server",
    )
    p.add_argument(
        "--lines", type=int, default=0, help="about this many lines more in the workflow's module"
    )
    p.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="with --start fork: cProfile each forked life into DIR/<pid>.prof",
    )
    keep_and_json(p)
    args = p.parse_args()
    figures = run_in_scratch("mailrun-boot-", bench, args)
    if args.json:
        print(json.dumps(figures))
    else:
        load = os.getloadavg()[0]
        print(
            f"{figures['starts']} starts ({args.start}) of an asleep deployment's sidecar"
            f" (load {load:.1f})"
        )
        for name, spread_ in (*figures["wall"].items(), *figures["cpu"].items()):
            print(f"  {name:16} p50 {spread_['p50_ms']:8.1f} ms   p90 {spread_['p90_ms']:8.1f} ms")
        print(
            f"  cpu_life mean    {figures['cpu_life_mean_ms']:8.1f} ms"
            f"   of it system {figures['cpu_life_system_mean_ms']:.1f} ms"
        )
        if figures["lives"] is not None:
            print(f"  each life's own: {figures['lives']}")
        print(f"  first start: {figures['first_start']}")
        print(f"  each mail handled once, each start asleep after: {figures['exactly_once']}")
    return 0 if figures["exactly_once"] else 1


if __name__ == "__main__":
    sys.exit(main())
