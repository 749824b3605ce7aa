"""A workload for fault tests: clients that send triggers and log every attempt.

Each of ``clients`` clients sends ``mails_per_client`` mails one after the
other. Mail ``n`` of client ``c`` has message id and subject ``w<c>-<n>``
and the body ``{"client": c, "n": n}`` (padded with ``pad`` characters). An
attempt without a definite answer is retried with the SAME message id
(backoff with jitter) until the hub accepts it, rejects it with a 4xx, or
the workload's deadline passes. A client sends its next mail only once the
previous one is settled, so its receipts come in the order of its mails.

Every attempt is one :class:`Op` of the :class:`History`, Jepsen style:

- ``ok``: 202 with an ``accepted`` receipt;
- ``fail``: definitely not accepted: a 4xx rejection (not retried), or a
  connection that was never established (the request never left; retried);
- ``indeterminate``: no usable answer (timeout, connection lost after the
  request was written, a 5xx, an unreadable body): the hub may or may not
  have accepted it; retried.

HTTP goes through aiohttp (httpx costs milliseconds of CPU per request under
load, and the client must not be what is slow). Loopback only.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
import anyio

from runtime import Backoff

Outcome = Literal["ok", "fail", "indeterminate"]

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def message_id(client: int, n: int, prefix: str = "w") -> str:
    return f"{prefix}{client}-{n}"


def body_of(client: int, n: int, pad: int = 0) -> str:
    """The body of mail ``n`` of ``client``; ``pad`` characters make it large
    (over 64 KiB the hub keeps it as a claim-checked blob)."""
    fields: dict[str, object] = {"client": client, "n": n}
    if pad:
        fields["pad"] = "x" * pad
    return json.dumps(fields)


@dataclass
class Op:
    """One attempt to send one mail. Times are seconds since the history began."""

    op_id: int
    client: int
    message_id: str
    invoked: float
    completed: float | None = None
    outcome: Outcome | None = None  # None while in flight
    receipt: dict[str, Any] | None = None
    status: int | None = None  # the HTTP status, when there was an answer
    error: str | None = None


@dataclass
class History:
    """Every operation of a workload, in invocation order."""

    ops: list[Op] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def now(self) -> float:
        return time.monotonic() - self.started

    def invoke(self, client: int, message_id: str) -> Op:
        op = Op(len(self.ops), client, message_id, self.now())
        self.ops.append(op)
        return op

    def complete(
        self,
        op: Op,
        outcome: Outcome,
        *,
        receipt: dict[str, Any] | None = None,
        status: int | None = None,
        error: str | None = None,
    ) -> Op:
        op.completed, op.outcome = self.now(), outcome
        op.receipt, op.status, op.error = receipt, status, error
        return op

    def by_outcome(self, outcome: Outcome) -> Iterator[Op]:
        return (op for op in self.ops if op.outcome == outcome)

    def accepted(self) -> set[str]:
        """Message ids with at least one ``ok`` receipt."""
        return {op.message_id for op in self.by_outcome("ok")}

    def unsettled(self) -> dict[str, float]:
        """Message ids attempted and not settled yet (no receipt, no 4xx) ->
        when their first attempt began."""
        first: dict[str, float] = {}
        settled: set[str] = set()
        for op in self.ops:
            first.setdefault(op.message_id, op.invoked)
            if op.outcome == "ok" or (op.outcome == "fail" and op.status is not None):
                settled.add(op.message_id)
        return {mid: at for mid, at in first.items() if mid not in settled}

    def dump(self, path: Path) -> None:
        """One JSON object per op, to read a failed run's history afterwards."""
        path.write_text("".join(json.dumps(asdict(op)) + "\n" for op in self.ops))

    @classmethod
    def load(cls, path: Path) -> History:
        return cls([Op(**json.loads(line)) for line in path.read_text().splitlines() if line])


@dataclass(frozen=True)
class WorkloadConfig:
    clients: int = 8
    mails_per_client: int = 25
    deadline: float = 60.0
    """Seconds for the whole workload; what is not accepted by then is given up."""
    attempt_timeout: float = 5.0
    backoff: Backoff = Backoff(0.02, 0.5)
    think: float = 0.0
    """Seconds a client pauses between two mails (stretches the workload over faults)."""
    seed: int = 0
    prefix: str = "w"
    pad: int = 0
    """Characters added to every body (see :func:`body_of`)."""


class Workload:
    """Sends the mails of every client to ``address`` through the hub at ``url``.

    ``history`` fills while :meth:`run` runs, so a test can time its faults
    by the workload's progress.
    """

    def __init__(
        self,
        url: str,
        address: str,
        config: WorkloadConfig | None = None,
        *,
        token: str | None = None,
    ) -> None:
        if urlsplit(url).hostname not in LOOPBACK:
            raise ValueError(f"the workload talks to loopback hubs only, not {url}")
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.address = address
        self.config = config or WorkloadConfig()
        self.history = History()
        self._deadline = 0.0

    async def run(self) -> History:
        config = self.config
        self._deadline = time.monotonic() + config.deadline
        connector = aiohttp.TCPConnector(limit=config.clients)
        async with (
            aiohttp.ClientSession(connector=connector, headers=self.headers) as session,
            anyio.create_task_group() as tg,
        ):
            for client in range(config.clients):
                tg.start_soon(self._client, session, client)
        return self.history

    def remaining(self) -> float:
        return self._deadline - time.monotonic()

    def planned(self) -> list[str]:
        """Every message id this workload means to send."""
        config = self.config
        return [
            message_id(client, n, config.prefix)
            for client in range(config.clients)
            for n in range(config.mails_per_client)
        ]

    async def _client(self, session: aiohttp.ClientSession, client: int) -> None:
        rng = random.Random(self.config.seed * 1_000_003 + client)
        for n in range(self.config.mails_per_client):
            if n and self.config.think:
                await anyio.sleep(self.config.think)
            if not await self._send(session, rng, client, n):
                return

    async def _send(
        self, session: aiohttp.ClientSession, rng: random.Random, client: int, n: int
    ) -> bool:
        """Attempt until settled; False once the deadline has passed."""
        config = self.config
        mid = message_id(client, n, config.prefix)
        payload = {
            "to": self.address,
            "subject": mid,
            "body": body_of(client, n, config.pad),
            "message_id": mid,
        }
        failures = 0
        while (left := self.remaining()) > 0:
            op = await self._attempt(
                session, client, mid, payload, min(left, config.attempt_timeout)
            )
            if op.outcome == "ok" or (op.outcome == "fail" and op.status is not None):
                return True
            failures += 1
            delay = config.backoff.delay(failures, rng=rng)
            await anyio.sleep(min(max(0.0, self.remaining()), delay))
        return False

    async def _attempt(
        self,
        session: aiohttp.ClientSession,
        client: int,
        mid: str,
        payload: dict[str, str],
        timeout: float,
    ) -> Op:
        history = self.history
        op = history.invoke(client, mid)
        try:
            async with session.post(
                f"{self.url}/mail", json=payload, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as resp:
                status, text = resp.status, await resp.text()
        except aiohttp.ClientConnectorError as exc:
            return history.complete(op, "fail", error=f"{type(exc).__name__}: {exc}")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return history.complete(op, "indeterminate", error=f"{type(exc).__name__}: {exc}")
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        if status == 202 and isinstance(body, dict) and body.get("status") == "accepted":
            return history.complete(op, "ok", receipt=body, status=status)
        if 400 <= status < 500:
            return history.complete(op, "fail", receipt=body, status=status, error=text[:200])
        return history.complete(op, "indeterminate", status=status, error=text[:200])
