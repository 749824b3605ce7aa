"""Several hubs on one PostgreSQL and one nats-server, each an OS process:
any hub accepts, the holder of a deployment's lease delivers it, and a hub
killed under load loses nothing (docs/scaling.md)."""

from __future__ import annotations

import random
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from hub.store import DATABASE_ENV
from tests.faults.harness.cluster import Proc
from tests.support import HubClient, NatsServerProcess, free_port, wait_for
from tests.support.launch.starts import HUB_START_TIMEOUT, started
from tests.support.servers.postgres import PostgresServer, query

pytestmark = pytest.mark.anyio

# Records each item's subject: "<client>-<n>".
RECORDER = """
async def main(ctx, item):
    ctx.state.setdefault("seen", []).append(item.subject)
"""


@dataclass
class Hubs:
    """Two hub processes (``procs``), their clients, one sidecar, one database."""

    procs: list[Proc]
    clients: list[HubClient]
    database: str
    sidecar_root: Path
    nats: NatsServerProcess

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return query(self.database, sql, *args)

    async def up(self, at: int) -> None:
        """Until hub ``at`` answers, as long as `mailrun up` waits for a hub."""
        proc = self.procs[at]
        assert proc.popen is not None, f"hub {at} was not started"
        await started(
            self.clients[at].healthz, exit_code=proc.popen.poll, logs=[proc.log_path],
            timeout=HUB_START_TIMEOUT, what=f"hub {at}'s /healthz",
        )  # fmt: skip

    async def restart(self, at: int) -> None:
        """SIGKILL hub ``at`` and start it again (as a supervisor would)."""
        proc = self.procs[at]
        proc.kill(signal.SIGKILL)
        await proc.wait_exit()
        proc.start()


@asynccontextmanager
async def two_hubs(tmp_path: Path, nats: NatsServerProcess, database: str) -> AsyncIterator[Hubs]:
    token = tmp_path / "admin-token"
    token.write_text("t" * 43 + "\n")
    token.chmod(0o600)
    sidecar_root = tmp_path / "sidecars"
    procs, clients = [], []
    for at in range(2):
        http = f"127.0.0.1:{free_port()}"
        argv = [
            sys.executable, "-m", "hub", "--state-dir", str(tmp_path / f"hub{at}"),
            "--http", http, "--nats", nats.url, "--sidecar-root", str(sidecar_root),
            "--token-file", str(token),
        ]  # fmt: skip
        env = {DATABASE_ENV: database, "MAILRUN_BACKOFF_MAX": "0.5"}
        procs.append(Proc(f"hub{at}", argv, tmp_path / f"hub{at}.log", env=env))
        clients.append(HubClient(f"http://{http}", timeout=5, token_file=token))
    hubs = Hubs(procs, clients, database, sidecar_root, nats)
    async with AsyncExitStack() as stack:
        for client in clients:
            stack.push_async_callback(client.aclose)
        for proc in procs:
            stack.push_async_callback(proc.stop)
            proc.start()
        for at in range(2):
            await hubs.up(at)
        yield hubs


async def sidecar(hubs: Hubs, deployment_id: str, tmp_path: Path) -> Proc:
    argv = [
        sys.executable, "-m", "sidecar", "--state-dir", str(hubs.sidecar_root / deployment_id),
        "--deployment", deployment_id, "--nats", hubs.nats.url,
    ]  # fmt: skip
    proc = Proc("sidecar", argv, tmp_path / "sidecar.log", env={"MAILRUN_BACKOFF_MAX": "0.5"})
    proc.start()
    return proc


async def test_two_hubs_lose_nothing_when_each_is_killed_under_load(
    tmp_path: Path, nats_server: NatsServerProcess, postgres_server: PostgresServer
) -> None:
    clients_count, per_client = 8, 40
    async with two_hubs(tmp_path, nats_server, postgres_server.new_database()) as hubs:
        dep = await hubs.clients[0].deploy("orders", RECORDER)
        side = await sidecar(hubs, dep["id"], tmp_path)
        try:
            sent = anyio.Event()
            progress = [0]
            rng = random.Random(7)

            async def client(c: int) -> None:
                for n in range(per_client):
                    order = [0, 1] if rng.random() < 0.5 else [1, 0]
                    with anyio.fail_after(60):
                        while True:
                            at = order[0]
                            try:
                                r = await hubs.clients[at].send(
                                    dep["address"], f"{c}-{n}", "body", message_id=f"m-{c}-{n}"
                                )
                                if r.status_code in (200, 202):
                                    break
                                assert r.status_code >= 500, r.text  # refused: a bug
                            except httpx.TransportError:
                                pass
                            order.reverse()  # the other hub, then this one again
                            await anyio.sleep(0.05)  # not spinning on two dead hubs
                    progress[0] += 1

            async def killer() -> None:
                total = clients_count * per_client
                for at, when in ((0, total // 3), (1, 2 * total // 3)):
                    await wait_for(lambda w=when: progress[0] >= w, timeout=60, what="load")
                    await hubs.restart(at)
                    await hubs.up(at)
                sent.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(killer)
                for c in range(clients_count):
                    tg.start_soon(client, c)
            assert sent.is_set()

            total = clients_count * per_client

            def settled() -> bool:
                rows = hubs.query(
                    "SELECT status, COUNT(*) FROM workflow_run_dispatch GROUP BY status"
                )
                return rows == [("processed", total)]

            await wait_for(settled, timeout=60, what="every dispatch processed")
            runs = hubs.query("SELECT id FROM workflow_run WHERE is_anchor = 0")
            assert len(runs) == 1  # one top-level run
            (run_id,) = runs[0]
            run = await hubs.clients[1].run(run_id)
            seen: list[str] = run["state"]["seen"]
            assert len(seen) == total and len(set(seen)) == total  # none lost, none twice
            for c in range(clients_count):
                mine = [int(s.split("-")[1]) for s in seen if s.startswith(f"{c}-")]
                assert mine == list(range(per_client)), c  # each client's order kept
            assert all(code == -signal.SIGKILL for p in hubs.procs for code in p.exit_codes)

            # Both hubs tell the sidecar's health, whichever of them serves it.
            async def connected_everywhere() -> bool:
                for client in hubs.clients:
                    r = await client.http.get(f"/workflows/deployments/{dep['id']}")
                    if r.status_code != 200 or r.json().get("connected") is not True:
                        return False
                return True

            await wait_for(connected_everywhere, timeout=20, what="both hubs to see the sidecar")
        finally:
            await side.stop()


async def test_fifty_first_triggers_split_across_two_hubs_mint_one_run(
    tmp_path: Path, nats_server: NatsServerProcess, postgres_server: PostgresServer
) -> None:
    async with two_hubs(tmp_path, nats_server, postgres_server.new_database()) as hubs:
        dep = await hubs.clients[0].deploy("first", RECORDER)
        receipts: list[Any] = []

        async def send(i: int) -> None:
            r = await hubs.clients[i % 2].send(dep["address"], f"m{i}", message_id=f"m{i}")
            assert r.status_code == 202, r.text
            receipts.append(r.json())

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(send, i)
        assert len({r["run_id"] for r in receipts}) == 1
        assert sorted(r["seq"] for r in receipts) == list(range(1, 51))
        runs = hubs.query(
            "SELECT id FROM workflow_run WHERE deployment_id = ? AND is_anchor = 0", dep["id"]
        )
        assert runs == [(receipts[0]["run_id"],)]
