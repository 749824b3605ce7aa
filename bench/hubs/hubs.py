"""Several hubs on PostgreSQL against one hub on SQLite, in one run, and the
time a hub's death costs (docs/scaling.md).

    .venv/bin/python bench/hubs/hubs.py [--mails 3000] [--deployments 6] [--senders 48]
        [--hubs 1 2 3] [--kills 3]

For each setup (one hub on SQLite, then 1, 2, 3 hubs on one PostgreSQL from
the pgserver wheel) it starts nats-server, the hubs and one sidecar per
deployment as processes, sends ``--mails`` single POSTs from ``--senders``
concurrent senders spread over the hubs and the deployments, and prints the
mails accepted per second and processed per second end to end (until the
last one is processed, read from the database).

Then, with two hubs on PostgreSQL, it SIGKILLs the hub serving the most
deployments ``--kills`` times: the clock starts at the kill and stops when a
mail sent to each deployment right after it (through the other hub) has been
processed; the killed hub is started again between kills. Prints each
takeover and the median.
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests' helpers

from bench.parts._http import Pool
from hub.store import DATABASE_ENV
from tests.faults.harness.cluster import Proc
from tests.support import HubClient, NatsServerProcess, free_port, wait_for
from tests.support.servers.postgres import PostgresServer, query

COUNTER = """
async def main(ctx, item):
    ctx.state["count"] = ctx.state.get("count", 0) + 1
"""
TOKEN = "b" * 43


@dataclass
class Setup:
    root: Path
    hubs: list[Proc]
    clients: list[HubClient]
    database: str | None  # None: SQLite in the first hub's state dir

    def count(self, sql: str, *args: Any) -> int:
        if self.database is None:
            import sqlite3

            with sqlite3.connect(f"file:{self.root / 'hub0' / 'hub.db'}?mode=ro", uri=True) as db:
                return int(db.execute(sql, args).fetchone()[0])
        rows = query(self.database, sql, *args)
        return int(rows[0][0]) if rows else 0


@asynccontextmanager
async def running(
    root: Path, nats: NatsServerProcess, hubs: int, database: str | None, deployments: int
) -> AsyncIterator[tuple[Setup, list[dict[str, Any]]]]:
    token = root / "admin-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    procs, clients = [], []
    for at in range(hubs):
        argv = [
            sys.executable, "-m", "hub", "--state-dir", str(root / f"hub{at}"),
            "--http", f"127.0.0.1:{free_port()}", "--nats", nats.url,
            "--sidecar-root", str(root / "sidecars"), "--token-file", str(token),
        ]  # fmt: skip
        env = {DATABASE_ENV: database} if database else {}
        procs.append(Proc(f"hub{at}", argv, root / f"hub{at}.log", env=env))
        clients.append(HubClient(f"http://{argv[6]}", timeout=30, token_file=token))
    setup = Setup(root, procs, clients, database)
    async with AsyncExitStack() as stack:
        for client in clients:
            stack.push_async_callback(client.aclose)
        for proc in procs:
            stack.push_async_callback(proc.stop)
            proc.start()
        for client in clients:
            await wait_for(client.healthz, timeout=60, what="a hub")
        deps = [await clients[0].deploy(f"d{i}", COUNTER) for i in range(deployments)]
        for dep in deps:
            argv = [
                sys.executable, "-m", "sidecar", "--state-dir", str(root / "sidecars" / dep["id"]),
                "--deployment", dep["id"], "--nats", nats.url,
            ]  # fmt: skip
            side = Proc(f"sidecar-{dep['id']}", argv, root / f"sidecar-{dep['id']}.log")
            stack.push_async_callback(side.stop)
            side.start()
        # Warm: one mail each, processed (every sidecar up and served).
        for i, dep in enumerate(deps):
            r = await clients[i % hubs].send(dep["address"], "warm")
            assert r.status_code == 202, r.text
        await wait_for(
            lambda: (
                setup.count(
                    "SELECT COUNT(*) FROM workflow_run_dispatch WHERE status = ?", "processed"
                )
                >= len(deps)
            ),
            timeout=60,
            what="the warm-up",
        )
        yield setup, deps


async def throughput(
    setup: Setup, deps: list[dict[str, Any]], mails: int, senders: int
) -> dict[str, float]:
    pools = [Pool("127.0.0.1", int(c.url.rsplit(":", 1)[1])) for c in setup.clients]
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    done_before = setup.count(
        "SELECT COUNT(*) FROM workflow_run_dispatch WHERE status = ?", "processed"
    )
    counter = iter(range(mails))
    started = time.perf_counter()

    async def sender(s: int) -> None:
        for n in counter:
            dep = deps[n % len(deps)]
            body = json.dumps({"to": dep["address"], "subject": f"m{n}", "body": "x"}).encode()
            status, answer = await pools[(n + s) % len(pools)].request(
                "POST", "/mail", body, headers
            )
            assert status == 202, answer

    async with anyio.create_task_group() as tg:
        for s in range(senders):
            tg.start_soon(sender, s)
    accepted = time.perf_counter() - started

    def processed() -> bool:
        count = setup.count(
            "SELECT COUNT(*) FROM workflow_run_dispatch WHERE status = ?", "processed"
        )
        return count >= done_before + mails

    await wait_for(processed, timeout=600, interval=0.05, what="every mail processed")
    total = time.perf_counter() - started
    for pool in pools:
        pool.close()
    return {"accepted_per_s": mails / accepted, "processed_per_s": mails / total}


async def takeovers(setup: Setup, deps: list[dict[str, Any]], kills: int) -> list[float]:
    took = []
    for _ in range(kills):
        # The hub serving the most deployments dies.
        victim = max(range(len(setup.hubs)), key=lambda at: _served(setup, at))
        other = setup.clients[1 - victim]
        before = setup.count(
            "SELECT COUNT(*) FROM workflow_run_dispatch WHERE status = ?", "processed"
        )
        setup.hubs[victim].kill(signal.SIGKILL)
        killed = time.perf_counter()
        for dep in deps:
            await _send(other, dep["address"])
        await wait_for(
            functools.partial(_processed_at_least, setup, before + len(deps)),
            timeout=60,
            interval=0.02,
            what="the takeover",
        )
        took.append(time.perf_counter() - killed)
        await setup.hubs[victim].wait_exit()
        setup.hubs[victim].start()
        await wait_for(setup.clients[victim].healthz, timeout=60, what="the hub back")
        # Settled again: both hubs hold their share before the next kill.
        await wait_for(
            lambda: all(_served(setup, at) > 0 for at in range(2)), timeout=60, what="shares"
        )
    return took


async def _send(client: HubClient, address: str) -> None:
    """One mail, sent again on a connection error (a keep-alive connection to
    a hub that was restarted since): what any client does."""
    with anyio.fail_after(30):
        while True:
            try:
                r = await client.send(address, "after the kill")
            except httpx.TransportError:
                await anyio.sleep(0.05)  # pacing retries, not waiting for a state
                continue
            assert r.status_code == 202, r.text
            return


def _processed_at_least(setup: Setup, count: int) -> bool:
    return (
        setup.count("SELECT COUNT(*) FROM workflow_run_dispatch WHERE status = ?", "processed")
        >= count
    )


def _served(setup: Setup, at: int) -> int:
    """Deployments whose lease the hub ``at`` (by its HTTP URL) holds."""
    url = setup.clients[at].url
    return setup.count(
        "SELECT COUNT(*) FROM hub_lease l JOIN hub_node n ON n.id = l.hub_id"
        " WHERE n.http_url = ? AND l.expires_at >= extract(epoch FROM clock_timestamp())",
        url,
    )


async def main_async(args: argparse.Namespace) -> None:
    postgres = PostgresServer()
    try:
        with tempfile.TemporaryDirectory(prefix="mailrun-hubs-") as tmp:
            setups: list[tuple[str, int, str | None]] = [("SQLite, 1 hub", 1, None)]
            setups += [(f"PostgreSQL, {n} hub(s)", n, "pg") for n in args.hubs]
            print(f"{args.mails} mails, {args.deployments} deployments, {args.senders} senders")
            for at, (name, hubs, kind) in enumerate(setups):
                root = Path(tmp) / f"setup{at}"
                root.mkdir()
                nats = NatsServerProcess(log_file=root / "nats.log")
                await nats.start()
                try:
                    database = postgres.new_database() if kind else None
                    async with running(root, nats, hubs, database, args.deployments) as (
                        setup,
                        deps,
                    ):
                        figures = await throughput(setup, deps, args.mails, args.senders)
                finally:
                    await nats.stop()
                print(
                    f"  {name:24s} accepted {figures['accepted_per_s']:7,.0f}/s"
                    f"   processed {figures['processed_per_s']:7,.0f}/s end to end"
                )
            root = Path(tmp) / "takeover"
            root.mkdir()
            nats = NatsServerProcess(log_file=root / "nats.log")
            await nats.start()
            try:
                database = postgres.new_database()
                async with running(root, nats, 2, database, args.deployments) as (setup, deps):
                    await wait_for(
                        lambda: all(_served(setup, at) > 0 for at in range(2)),
                        timeout=60,
                        what="shares",
                    )
                    took = await takeovers(setup, deps, args.kills)
            finally:
                await nats.stop()
            shown = ", ".join(f"{t:.2f}" for t in took)
            print(
                f"takeover of a killed hub's deployments (2 hubs, clock from the kill to a mail"
                f" to each processed): median {statistics.median(took):.2f} s ({shown})"
            )
    finally:
        postgres.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mails", type=int, default=3000)
    parser.add_argument("--deployments", type=int, default=6)
    parser.add_argument("--senders", type=int, default=48)
    parser.add_argument("--hubs", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--kills", type=int, default=3)
    anyio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    main()
