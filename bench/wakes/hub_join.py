"""What a sidecar's join and its Sleep cost the hub: the hub's side of every
wake, without the sidecar's own start.

    .venv/bin/python bench/wakes/hub_join.py [--deployments 50] [--rounds 10] [--concurrency 8]
        [--again] [--keep] [--json]

Starts nats-server and a hub (``python -m hub``, fsync on), deploys
``--deployments`` workflows and then, ``--rounds`` times over every
deployment (``--concurrency`` at a time), speaks a woken sidecar's part of
the wire from this process: its hello (answered by a Challenge), the signed
hello (answered by a Welcome: the claim), then its Sleep (answered by
Asleep), each on the deployment's own subjects with a NATS connection of
its own and a new instance id, as a forked sidecar of the same home would.
``--again`` says the signed hello a second time before the Sleep, from the
same instance (what a sidecar does when its first hello's answer came after
its timeout: the owner already holds the claim).

Prints the hub's CPU (user and system, from the kernel, over the rounds;
its idle CPU over as long a time before them subtracted) per join, and the
wall time from the first hello to the Welcome and from the Sleep to
Asleep, median and p90. Exits 1 unless every join was welcomed and every
Sleep granted.

Run with ``PYTHONPATH`` on another checkout to price its hub.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests' helpers

from bench.mail.bench_e2e import keep_and_json, percentile, run_in_scratch
from runtime import (
    Asleep,
    Challenge,
    FrameDecoder,
    Hello,
    Refused,
    Sleep,
    Subjects,
    Welcome,
    encode,
    hello_message,
    new_id,
)
from runtime.sidecar_contract import decode_restore_record
from runtime.transport import Transport, open_nats
from runtime.wire import SUPPORTED_FORMATS, sign, unb64url
from tests.faults.harness.cluster import Proc
from tests.support import HubClient, NatsServerProcess, free_port, wait_for

SOURCE = "async def main(ctx, item):\n    pass\n"
TIMEOUT = 10.0

_decoder: FrameDecoder[Challenge | Welcome | Refused | Asleep] = FrameDecoder(
    Challenge | Welcome | Refused | Asleep
)


class Joiner:
    """One deployment's sidecar side of a join and a Sleep, over its own connection."""

    def __init__(self, transport: Transport, record: Any) -> None:
        self.transport = transport
        self.dep = record.deployment_id
        self.seed = record.hub_key.seed
        self.public_key = record.public_key
        self.home = "home_" + new_id("ins")[4:]
        self.subjects = Subjects("mailrun", deployment_id=self.dep)

    async def ask(self, subject: str, frame: Any) -> Any:
        return _decoder.decode(await self.transport.request(subject, encode(frame), TIMEOUT))

    async def signed(self, instance: str) -> Welcome | Refused:
        hello = Hello(
            deployment_id=self.dep,
            instance_id=instance,
            public_key=self.public_key,
            home=self.home,
            formats=list(SUPPORTED_FORMATS),
        )
        challenge = await self.ask(self.subjects.hello, hello)
        assert isinstance(challenge, Challenge), challenge
        signature = sign(self.seed, hello_message(challenge.nonce, self.dep, instance))
        reply = await self.ask(
            self.subjects.hello,
            Hello(
                deployment_id=self.dep,
                instance_id=instance,
                public_key=self.public_key,
                home=self.home,
                formats=list(SUPPORTED_FORMATS),
                nonce=challenge.nonce,
                signature=signature,
            ),
        )
        assert isinstance(reply, Welcome | Refused), reply
        return reply

    async def cycle(self, again: bool, figures: dict[str, list[float]]) -> bool:
        """A wake's join and its Sleep; whether both were granted."""
        instance = new_id("ins")
        began = time.perf_counter()
        welcome = await self.signed(instance)
        figures["hello_to_welcome"].append(time.perf_counter() - began)
        if again and isinstance(welcome, Welcome):
            began = time.perf_counter()
            welcome = await self.signed(instance)
            figures["again_to_welcome"].append(time.perf_counter() - began)
        if not isinstance(welcome, Welcome):
            print(f"{self.dep}: {welcome}", file=sys.stderr)
            return False
        began = time.perf_counter()
        sleep = Sleep(
            deployment_id=self.dep, session_id=welcome.session_id, owner_epoch=welcome.owner_epoch
        )
        reply = await self.ask(self.subjects.sleep, sleep)
        figures["sleep_to_asleep"].append(time.perf_counter() - began)
        if not isinstance(reply, Asleep):
            print(f"{self.dep}: {reply}", file=sys.stderr)
        return isinstance(reply, Asleep)


def cpu_of(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


async def bench(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    token = tmp / "admin-token"
    token.write_text("b" * 43 + "\n")
    token.chmod(0o600)
    nats = NatsServerProcess(log_file=tmp / "nats.log")
    http = f"127.0.0.1:{free_port()}"
    hub_argv = [
        sys.executable, "-m", "hub", "--state-dir", str(tmp / "hub"), "--http", http,
        "--nats", nats.url, "--token-file", str(token),
    ]  # fmt: skip
    figures: dict[str, list[float]] = {
        "hello_to_welcome": [],
        "again_to_welcome": [],
        "sleep_to_asleep": [],
    }
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(nats)
        hub_proc = Proc("hub", hub_argv, tmp / "hub.log")
        stack.push_async_callback(hub_proc.stop)
        hub_proc.start()
        hub = HubClient(f"http://{http}", timeout=30, token_file=token)
        stack.push_async_callback(hub.aclose)
        await wait_for(hub.healthz, timeout=60, what="the hub")
        joiners = []
        for n in range(args.deployments):
            created = await hub.deploy(f"join{n}", SOURCE)
            record, _ = decode_restore_record(unb64url(created["join_token"]))
            transport = await stack.enter_async_context(
                open_nats(
                    nats.url,
                    name=f"bench-{record.deployment_id}",
                    inbox_prefix=Subjects.inbox_prefix(record.deployment_id),
                )
            )
            joiners.append(Joiner(transport, record))
        # Each deployment's first join (its first owner) is not a wake.
        for joiner in joiners:
            assert await joiner.cycle(False, {k: [] for k in figures})
        hub_pid = hub_proc.pid
        assert hub_pid is not None
        hub_ps = psutil.Process(hub_pid)
        idle_from, idle_cpu = time.perf_counter(), cpu_of(hub_ps)
        await anyio.sleep(args.idle)
        idle_rate = (cpu_of(hub_ps) - idle_cpu) / (time.perf_counter() - idle_from)
        ok: list[bool] = []
        limit = anyio.Semaphore(args.concurrency)

        async def one(joiner: Joiner) -> None:
            async with limit:
                ok.append(await joiner.cycle(args.again, figures))

        began, cpu_before = time.perf_counter(), cpu_of(hub_ps)
        own_before = time.process_time()
        for _ in range(args.rounds):
            async with anyio.create_task_group() as tg:
                for joiner in joiners:
                    tg.start_soon(one, joiner)
        wall = time.perf_counter() - began
        cpu = cpu_of(hub_ps) - cpu_before - idle_rate * wall
        own = time.process_time() - own_before
    joins = len(ok)
    return {
        "deployments": args.deployments,
        "joins": joins,
        "concurrency": args.concurrency,
        "again": args.again,
        "hub_cpu_ms_per_join": round(cpu / joins * 1000, 3),
        "hub_idle_cpu_share": round(idle_rate, 4),
        "bench_cpu_ms_per_join": round(own / joins * 1000, 3),
        "joins_per_s": round(joins / wall, 1),
        "wall_ms": {
            name: {
                "p50": round(percentile(sorted(values), 0.5) * 1000, 2),
                "p90": round(percentile(sorted(values), 0.9) * 1000, 2),
            }
            for name, values in figures.items()
            if values
        },
        "all_granted": all(ok),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--deployments", type=int, default=50)
    p.add_argument("--rounds", type=int, default=10, help="joins and Sleeps of every deployment")
    p.add_argument("--concurrency", type=int, default=8, help="joins in flight at once")
    p.add_argument(
        "--again", action="store_true", help="say the signed hello twice (the owner again)"
    )
    p.add_argument(
        "--idle", type=float, default=3.0, help="seconds the idle hub's CPU is measured first"
    )
    keep_and_json(p)
    args = p.parse_args()
    figures = run_in_scratch("mailrun-join-", bench, args)
    if args.json:
        print(json.dumps(figures))
    else:
        load = os.getloadavg()[0]
        print(
            f"{figures['joins']} joins and Sleeps over {figures['deployments']} deployments,"
            f" {figures['concurrency']} at once{' (hello said twice)' if args.again else ''}"
            f" (load {load:.1f})"
        )
        print(
            f"  hub CPU per join and Sleep {figures['hub_cpu_ms_per_join']:.3f} ms;"
            f" {figures['joins_per_s']} joins/s (this process's CPU per join"
            f" {figures['bench_cpu_ms_per_join']:.3f} ms)"
        )
        for name, spread in figures["wall_ms"].items():
            print(f"  {name:18} p50 {spread['p50']:8.2f} ms   p90 {spread['p90']:8.2f} ms")
        print(f"  every join welcomed, every Sleep granted: {figures['all_granted']}")
    return 0 if figures["all_granted"] else 1


if __name__ == "__main__":
    sys.exit(main())
