"""Challenge nonces: what a sidecar's hello is challenged with, and the
deployment's row the Challenge read, kept for the signed hello that comes
back (``HelloHandler``, hub/wire/sessions/hello.py).

A nonce is used once, for one deployment, within ``NONCE_TTL`` seconds;
at most ``MAX_NONCES`` are kept (the oldest go first): a flood of hellos
that never come back holds bounded memory.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict

from ...store import OwnerRow

NONCE_TTL = 30.0
MAX_NONCES = 10_000


class Nonces:
    """Challenge nonces: single use, bound to one deployment, kept ``ttl``
    seconds, each with the deployment's row as the Challenge read it."""

    def __init__(self, *, ttl: float = NONCE_TTL, limit: int = MAX_NONCES) -> None:
        self._issued: OrderedDict[str, tuple[str, float, OwnerRow]] = OrderedDict()
        self._ttl = ttl
        self._limit = limit

    def issue(self, deployment_id: str, row: OwnerRow) -> str:
        nonce = secrets.token_urlsafe(24)
        now = time.monotonic()
        # Issued in order with one ttl: the expired ones are at the front.
        while self._issued and next(iter(self._issued.values()))[1] <= now:
            self._issued.popitem(last=False)
        self._issued[nonce] = (deployment_id, now + self._ttl, row)
        while len(self._issued) > self._limit:
            self._issued.popitem(last=False)
        return nonce

    def take(self, nonce: str, deployment_id: str) -> OwnerRow | None:
        """The row kept with ``nonce`` if it is valid for the deployment
        (None if not); used up either way."""
        taken = self.take_issued(nonce, deployment_id)
        return None if taken is None else taken[0]

    def take_issued(self, nonce: str, deployment_id: str) -> tuple[OwnerRow, float] | None:
        """:meth:`take`, with when the nonce was issued (``time.monotonic()``)."""
        entry = self._issued.pop(nonce, None)
        if entry is None or entry[0] != deployment_id or entry[1] <= time.monotonic():
            return None
        return entry[2], entry[1] - self._ttl
