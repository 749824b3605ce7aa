"""The hub's HTTP API as tests call it: deploy, send, read a run, /healthz."""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import anyio
import httpx

from .waiting import wait_for


class AdminToken(httpx.Auth):
    """``Authorization: Bearer`` with the token in ``path``, read once the file
    exists: the hub being started creates it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.token: str | None = None

    def read(self) -> str | None:
        if self.token is None and self.path.exists():
            self.token = self.path.read_text().strip() or None
        return self.token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self.read() is not None:
            request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


async def admit(client: httpx.AsyncClient, token_file: Path, *, timeout: float = 60) -> None:
    """Wait for the hub behind ``client`` to answer ``/healthz``, then send its
    admin token (``token_file``, which the hub wrote by then) with every
    request of ``client``: how a bench that starts ``mailrun up`` opens."""

    async def healthy() -> bool:
        try:
            return (await client.get("/healthz")).status_code == 200
        except httpx.TransportError:
            return False

    await wait_for(healthy, timeout=timeout, interval=0.05, what="hub /healthz")
    token = await anyio.Path(token_file).read_text()
    client.headers["Authorization"] = f"Bearer {token.strip()}"


class HubClient:
    """An httpx client on a running hub (``http``, for any other request),
    with the calls tests make again and again. With ``token_file`` (the
    hub's ``<state-dir>/admin-token``) every request carries the admin token.
    Close it with ``aclose`` (``contextlib.aclosing`` for a block)."""

    def __init__(self, url: str, *, timeout: float = 30, token_file: Path | None = None) -> None:
        self.url = url
        self.auth = AdminToken(token_file) if token_file is not None else None
        self.http = httpx.AsyncClient(base_url=url, timeout=timeout, auth=self.auth)

    @property
    def token(self) -> str | None:
        """The admin token this client sends (None before the hub created it)."""
        return self.auth.read() if self.auth is not None else None

    async def healthz(self) -> dict[str, Any] | None:
        """The hub's /healthz, or None while it does not answer (or not 200)."""
        try:
            r = await self.http.get("/healthz", timeout=2)
        except httpx.TransportError:
            return None
        return r.json() if r.status_code == 200 else None

    async def deploy(
        self, name: str, source: str, entrypoint: str = "flow:main", **policy: Any
    ) -> Any:
        """Deploy ``source`` (``policy``: its failure policy's fields); the
        created deployment (with its join token)."""
        r = await self.http.post(
            "/workflows/deployments",
            json={"name": name, "source": source, "entrypoint": entrypoint, **policy},
        )
        assert r.status_code == 201, r.text
        return r.json()

    async def send(self, to: str, subject: str, body: str = "", **extra: Any) -> httpx.Response:
        """POST /mail; the response as it came (a receipt or an error)."""
        return await self.http.post(
            "/mail", json={"to": to, "subject": subject, "body": body, **extra}
        )

    async def run(self, run_id: str) -> Any:
        r = await self.http.get(f"/runs/{run_id}")
        assert r.status_code == 200, r.text
        return r.json()

    async def wait_state(
        self,
        run_id: str,
        pred: Callable[[Any], bool],
        timeout: float = 20.0,
        what: str = "run state",
    ) -> Any:
        """The run once ``pred(run)`` holds (the hub may be restarting meanwhile)."""

        async def probe() -> Any:
            try:
                run = await self.run(run_id)
            except httpx.TransportError:
                return None
            return run if pred(run) else None

        return await wait_for(probe, timeout=timeout, what=what)

    async def aclose(self) -> None:
        await self.http.aclose()
