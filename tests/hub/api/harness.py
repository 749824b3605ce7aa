"""The hub's HTTP app over a Store in tmp_path, called through httpx's ASGI
transport: ``client`` sends the admin token, ``anonymous`` sends nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette

from hub import Acceptor, Store, create_app
from hub.api.app import ApiSettings
from hub.store import open_store
from tests.support.store import read_one

SOURCE = "async def main(ctx, item):\n    pass\n"
MAX_BODY = 256 * 1024
TOKEN = "admin-token-of-the-tests-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
ORIGIN = "http://hub"  # the base URL's: the hub's own origin


@dataclass
class Api:
    app: Starlette
    client: httpx.AsyncClient
    anonymous: httpx.AsyncClient
    store: Store

    async def deploy(self, name: str, **kw: Any) -> dict[str, Any]:
        spec = {"name": name, **(kw or {"source": SOURCE})}
        r = await self.client.post("/workflows/deployments", json=spec)
        assert r.status_code == 201, r.text
        return dict(r.json())

    async def send(self, to: str, **kw: Any) -> httpx.Response:
        return await self.client.post("/mail", json={"to": to, "subject": "hi", **kw})

    async def count(self, sql: str, *params: object) -> int:
        row = await read_one(self.store, sql, *params)
        assert row is not None
        return int(row[0])


@asynccontextmanager
async def api(
    tmp_path: Path,
    *,
    sidecar_root: Path | None = None,
    health_extra: Callable[[], Mapping[str, Any]] = lambda: {"connected_sidecars": 0},
    body_timeout: float = 60.0,
    domains: tuple[str, ...] = (),
) -> AsyncIterator[Api]:
    settings = ApiSettings(
        domain="mailrun.local", nats_url="nats://127.0.0.1:4222", subject_prefix="mailrun",
        sidecar_root=sidecar_root, max_body=MAX_BODY, body_timeout=body_timeout,
        domains=domains,
    )  # fmt: skip
    async with await open_store(tmp_path / "hub.db") as store:
        acceptor = Acceptor(store)
        app = create_app(
            store=store, acceptor=acceptor, settings=settings, admin_token=TOKEN,
            boot_id="boot_x", health_extra=health_extra,
        )  # fmt: skip
        async with anyio.create_task_group() as tg:
            await tg.start(acceptor.run)
            # A bug must answer like the server would, not raise into the test.
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            async with (
                httpx.AsyncClient(
                    transport=transport, base_url="http://hub", headers=BEARER
                ) as client,
                httpx.AsyncClient(transport=transport, base_url="http://hub") as anonymous,
            ):
                yield Api(app, client, anonymous, store)
            tg.cancel_scope.cancel()


def assert_error(r: httpx.Response, code: int, reason: str) -> None:
    assert r.status_code == code, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["reason"] == reason and body["status"] in ("error", "rejected") and body["detail"]
    assert set(body) == {"status", "reason", "detail"}
