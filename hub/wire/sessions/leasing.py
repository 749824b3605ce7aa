"""Which deployments this hub serves: all of them, or those it holds a lease on.

One hub (SQLite, or PostgreSQL with ``--hubs`` left at one) serves every
deployment: :class:`Everything`. Several hubs on one PostgreSQL share them
by lease (``hub.store.sessions``' leases): :class:`LeaseKeeper` renews this hub's
leases every ``every`` seconds, takes free and expired ones up to its fair
share, and tells the wire side what it gained and lost.

What serving means: only the holder answers a deployment's sidecar (its
hello, events, blob, mint and state requests come on subjects named after
the deployment; every hub hears them, the others stay silent), only the
holder has a session for it, and so only the holder delivers its
dispatches. Every delivery write checks the lease in its transaction (its
fence carries :meth:`LeaseKeeper.lease`: ``hub.store``'s ``check_fence``),
so a hub that lost a lease without noticing (paused past the lease's life)
writes nothing for that deployment.

A hub that cannot renew (its database unreachable) stops serving what it
held once the leases would have expired, whether or not another hub took
them: the holder is whoever the database says.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import anyio
import msgspec

from runtime import Flag, Wakeup, is_id, new_id

from ...store import (
    LeaseRound,
    LeaseToken,
    Store,
    Tx,
    hold_role,
    release_all,
    renew_and_take,
    share_health,
)

log = logging.getLogger("mailrun.hub.leases")

LEASE_TTL = 2.5
"""A lease's life past its last renewal: a dead hub's deployments are taken
over within this plus one renewal period."""
LEASE_EVERY = 0.5


class Leases(Protocol):
    def serves(self, deployment_id: str) -> bool:
        """Whether this hub answers the deployment's sidecar now."""
        ...

    def lease(self, deployment_id: str) -> LeaseToken | None:
        """The lease a write for the deployment is fenced by (its fence
        raises ``LeaseLost`` unless this hub still holds it); None: no lease
        to check."""
        ...


class Everything:
    """One hub: every deployment is its own."""

    def serves(self, deployment_id: str) -> bool:
        return True

    def lease(self, deployment_id: str) -> LeaseToken | None:
        return None


class LeaseKeeper:
    """This hub's leases, renewed by :meth:`run`."""

    def __init__(
        self,
        store: Store,
        hub_id: str,
        *,
        http_url: str = "",
        ttl: float = LEASE_TTL,
        every: float = LEASE_EVERY,
    ) -> None:
        self._store = store
        self.hub_id = hub_id
        self._http_url = http_url
        self._ttl = ttl
        self._every = every
        self._held: dict[str, int] = {}
        self._valid_until = 0.0  # monotonic: past it, nothing is served
        self.hubs = 1
        self.on_gained: Callable[[set[str]], object] = lambda deps: None
        self.on_lost: Callable[[set[str]], object] = lambda deps: None
        self._poke = Wakeup()
        self._restarted = True  # until the first round is done
        self._roles: dict[str, Flag] = {}  # the roles this hub asks for -> held now
        self.report: Callable[[str], Mapping[str, Any]] = lambda dep: {}
        """What this hub knows of a deployment it serves (the wire side's health)."""
        self._health: dict[str, Mapping[str, Any]] = {}  # every held deployment's, any hub
        self._role_scopes: dict[str, set[anyio.CancelScope]] = {}

    def serves(self, deployment_id: str) -> bool:
        return deployment_id in self._held and time.monotonic() < self._valid_until

    def held(self) -> set[str]:
        return set(self._held) if time.monotonic() < self._valid_until else set()

    def lease(self, deployment_id: str) -> LeaseToken:
        # Token 0 is never held: a write for a deployment not held fails.
        return LeaseToken(self.hub_id, self._held.get(deployment_id, 0))

    def poke(self) -> None:
        """Renew now (a deployment was created or deleted)."""
        self._poke.set()

    def health_of(self, deployment_id: str) -> Mapping[str, Any] | None:
        """The holder's view of a deployment this hub does not serve, as of
        the last round (None: no hub serves it)."""
        return self._health.get(deployment_id)

    async def with_role(self, name: str, job: Callable[[], Awaitable[object]]) -> None:
        """Run ``job`` whenever this hub holds role ``name`` (``hub_role``),
        cancelled when the role is lost; until cancelled itself."""
        held = self._roles.setdefault(name, Flag())
        self._poke.set()
        while True:
            await held.wait()
            with anyio.CancelScope() as scope:
                self._role_scopes.setdefault(name, set()).add(scope)
                try:
                    log.info("holding role %s", name)
                    await job()
                    await anyio.sleep_forever()  # a job that ends keeps the role
                finally:
                    self._role_scopes[name].discard(scope)
            log.info("role %s lost", name)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Renew until cancelled; started once the first round is done (or
        failed: a hub whose database is down serves nothing until it is back)."""
        started = False
        try:
            while True:
                await self._round()
                if not started:
                    task_status.started()
                    started = True
                await self._poke.wait(self._every)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
                await self._release()

    async def _round(self) -> None:
        began = time.monotonic()

        mine = {dep: _encode(self.report(dep)) for dep in self._held}
        restarted = self._restarted

        def body(tx: Tx) -> tuple[LeaseRound, dict[str, str]]:
            result = renew_and_take(tx, self.hub_id, self._http_url, self._ttl, restarted=restarted)
            roles = {r for r in self._roles if hold_role(tx, r, self.hub_id, self._ttl)}
            health = share_health(tx, self.hub_id, mine)
            return dataclasses.replace(result, roles=frozenset(roles)), health

        try:
            result, health = await self._store.transact(body)
        except Exception as exc:
            log.warning("cannot renew leases: %s", exc)
            if time.monotonic() >= self._valid_until:
                self._drop_roles(set(self._roles))
                if self._held:
                    lost, self._held = set(self._held), {}
                    log.warning("leases of %d deployment(s) expired unrenewed", len(lost))
                    self.on_lost(lost)
            return
        # Valid for the ttl from when the renewal began, not when it returned.
        self._valid_until = began + self._ttl
        self._restarted = False
        self.hubs = result.hubs
        self._health = {dep: _decode(view) for dep, view in health.items()}
        for role in result.roles:
            self._roles[role].set()
        self._drop_roles(set(self._roles) - result.roles)
        before = self._held
        self._held = result.held
        lost = {d for d, t in before.items() if result.held.get(d) != t}
        gained = {d for d, t in result.held.items() if before.get(d) != t}
        if lost:
            log.info("gave up or lost %d lease(s)", len(lost))
            self.on_lost(lost)
        if gained:
            log.info("took %d lease(s) (%d hub(s) live)", len(gained), result.hubs)
            self.on_gained(gained)

    def _drop_roles(self, roles: set[str]) -> None:
        for role in roles:
            self._roles[role].clear()
            for scope in self._role_scopes.get(role, ()):
                scope.cancel()

    async def _release(self) -> None:
        self._drop_roles(set(self._roles))
        held, self._held = set(self._held), {}

        try:
            await self._store.transact(partial(release_all, hub_id=self.hub_id))
        except Exception as exc:
            log.warning("cannot release leases: %s", exc)
        if held:
            self.on_lost(held)


def _encode(view: Mapping[str, Any]) -> str:
    return msgspec.json.encode(dict(view)).decode()


def _decode(text: str) -> Mapping[str, Any]:
    try:
        view = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return {}
    return view if isinstance(view, dict) else {}


HUB_ID_FILE = "hub-id"


def hub_identity(state_dir: Path) -> str:
    """This hub's id among several (``<state-dir>/hub-id``, created at the
    first start): the same across restarts, so a restarted hub takes back
    its own leases at once instead of waiting for them to expire."""
    path = state_dir / HUB_ID_FILE
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        text = ""
    if is_id(text, "hub"):
        return text
    hub_id = new_id("hub")
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{hub_id}.tmp")
    tmp.write_text(hub_id + "\n", encoding="ascii")
    tmp.replace(path)
    return hub_id
