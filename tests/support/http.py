"""The hub's HTTP API as tests call it: deploy, send, read a run, /healthz."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from .waiting import wait_for


class HubClient:
    """An httpx client on a running hub (``http``, for any other request),
    with the calls tests make again and again. Close it with ``aclose``
    (``contextlib.aclosing`` for a block)."""

    def __init__(self, url: str, *, timeout: float = 30) -> None:
        self.url = url
        self.http = httpx.AsyncClient(base_url=url, timeout=timeout)

    async def healthz(self) -> dict[str, Any] | None:
        """The hub's /healthz, or None while it does not answer (or not 200)."""
        try:
            r = await self.http.get("/healthz", timeout=2)
        except httpx.TransportError:
            return None
        return r.json() if r.status_code == 200 else None

    async def deploy(self, name: str, source: str, entrypoint: str = "flow:main") -> Any:
        """Deploy ``source``; the created deployment (with its join token)."""
        r = await self.http.post(
            "/workflows/deployments",
            json={"name": name, "source": source, "entrypoint": entrypoint},
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
