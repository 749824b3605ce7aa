"""What ``mailrun up`` knows of the hub's deployments: a listing kept from
poll to poll, each poll reading only what changed since the one before.

``GET /workflows/deployments?changed_after=C`` answers the deployments
changed after the answer that gave ``cursor`` C, or all of them (``whole``)
when the hub cannot follow C; a hub that gives no cursor (an older
release) lists all every time. Either way the poll costs the hub what
changed, not what exists: with 2,000 deployments a full listing took 32 ms
of the hub's CPU, every half second, on the loop that also answers wakes.

A view is as old as the poll that brought it. A sidecar of ours that fell
asleep after its deployment's view was read is not shown awake by that
view: on a database several hubs write, the change that says it fell
asleep may come a poll later (the hub's cursor waits at a gap).

A deployment seen deleted keeps its NATS identity for ``REVOKE_AFTER``
seconds more. The hub tells its sidecar at once (a Fenced notice on the
sidecar's subject, at most once), and the sidecar stops when the hub refuses
the hello that notice makes it say: revoked sooner, the server could close
the sidecar's connection before the notice reached it, and the sidecar, its
identity refused and told nothing, would retry forever instead of stopping.
Meanwhile the identity can do nothing the hub accepts: the delete fenced it.

The users are kept per deployment and follow each changed view: a wake or
a sleep (the status moves between live ones) changes no user, and the
admitted set stays the same object, which the NATS config compares at no
cost. With 500 deployments waking and sleeping, deriving every user again
on each poll that changed anything was a tenth of ``up``'s CPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime import is_id
from runtime.wire import DeploymentStatus, anchor_is_live

from ..natsauth import DeploymentUser, users_of

REVOKE_AFTER = 5.0
"""Seconds a deployment seen deleted stays admitted to NATS (see above)."""


@dataclass(slots=True, frozen=True)
class _Known:
    item: Mapping[str, Any]
    read_at: float  # when the poll that brought it was asked


class Listing:
    """The hub's deployments as the polls so far told them."""

    def __init__(self) -> None:
        self.cursor = 0
        """What the next poll sends as ``changed_after`` (0: list them all)."""
        self._known: dict[str, _Known] = {}
        self._users: dict[str, DeploymentUser] = {}  # of the live ones that have one
        self._admitted: frozenset[DeploymentUser] | None = None  # theirs, while unchanged
        self._deleted: dict[str, _Known] = {}  # seen going from live to deleted, and when
        self.whole = True
        """The last answer listed every deployment (else what changed)."""
        self.changed: set[str] = set()
        """The deployments the last answer named."""

    def __len__(self) -> int:
        return len(self._known)

    def apply(self, answer: Mapping[str, Any], asked_at: float) -> None:
        """Take a poll's answer, asked for at ``asked_at``."""
        items = answer.get("deployments")
        cursor = answer.get("cursor")
        followed = type(cursor) is int and cursor >= 0 and answer.get("whole") is False
        if not followed:
            self._known = {}
            self._users = {}
            self._admitted = None
        self.whole = not followed
        self.changed = set()
        for item in items if isinstance(items, list) else []:
            # Ids become path components below: only well-formed ones count.
            if isinstance(item, dict) and is_id(item.get("id"), "dep"):
                dep = item["id"]
                self.changed.add(dep)
                before = self._known.get(dep)
                if before is not None and _live(before.item) and not _live(item):
                    self._deleted[dep] = _Known(before.item, asked_at)
                self._known[dep] = _Known(item, asked_at)
                self._follow_user(dep, item)
        self.cursor = cursor if type(cursor) is int and cursor >= 0 else 0

    def statuses(
        self, asleep: Mapping[str, float], among: Iterable[str] | None = None
    ) -> dict[str, str]:
        """Each deployment's shown status (``among``: of these alone, those
        known). ``asleep``: ours that fell asleep, and when
        (``anyio.current_time()``); one whose view was read before is shown
        asleep, not as that view says."""
        shown: dict[str, str] = {}
        if among is None:
            known_ones: Iterable[tuple[str, _Known]] = self._known.items()
        else:
            known_ones = [(dep, self._known[dep]) for dep in among if dep in self._known]
        for dep, known in known_ones:
            status = str(known.item.get("status", ""))
            fell = asleep.get(dep)
            if fell is not None and known.read_at < fell and status == DeploymentStatus.DEPLOYED:
                status = DeploymentStatus.ASLEEP.value
            shown[dep] = status
        return shown

    def users(self, now: float) -> frozenset[DeploymentUser]:
        """The NATS users of the live deployments (asleep ones included), and
        of those seen deleted less than ``REVOKE_AFTER`` before ``now``: the
        same object from call to call while that does not change."""
        if self._admitted is None:
            self._admitted = frozenset(self._users.values())
        for dep, gone in list(self._deleted.items()):
            known = self._known.get(dep)
            if now - gone.read_at >= REVOKE_AFTER or known is None or _live(known.item):
                del self._deleted[dep]
        if not self._deleted:
            return self._admitted
        return self._admitted | users_of(gone.item for gone in self._deleted.values())

    def _follow_user(self, dep: str, item: Mapping[str, Any]) -> None:
        user = next(iter(users_of((item,))), None) if _live(item) else None
        if self._users.get(dep) == user:
            return
        if user is None:
            del self._users[dep]
        else:
            self._users[dep] = user
        self._admitted = None


def _live(item: Mapping[str, Any]) -> bool:
    return anchor_is_live(str(item.get("status", "")))
