"""The deployment's workflow code, by version.

Version 1 is the restore record's sources (every sidecar of the deployment
has them). A later version's sources come from the hub as a blob (the claim
check on the frames that need it, or on ``LoadVersion``) and are kept in the
inbox before anything that needs them is acknowledged: an envelope stored
here always has its code here too, through restarts and without the hub.

Each version is imported as a package of its own (``_workflow``), on first
use, so two versions run side by side while items stamped with the older
one are still being processed. A later version is imported (and a child
run's entrypoint resolved) on a worker thread, one at a time: user code
runs at import, for as long as it likes, and the loop serves on meanwhile
(mail is delivered and processed while a rollout imports its code).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio
import msgspec

from runtime import Claim, Sources, TransportError

from ..._errors import SidecarError, WorkflowLoadError
from ...storage import Inbox
from ._workflow import (
    Handler,
    StateMigration,
    load_workflow,
    resolve_entrypoint,
    state_migration,
)

log = logging.getLogger("mailrun.sidecar.versions")

T = TypeVar("T")

Fetch = Callable[[Claim], Awaitable[bytes]]
"""Fetches a blob from the hub and checks its digest (``HubLink.fetch_blob``)."""


class Versions:
    def __init__(
        self, *, inbox: Inbox, deployment_id: str, home: Path, first: Handler, first_entrypoint: str
    ) -> None:
        self._inbox = inbox
        self._deployment_id = deployment_id
        self._home = home
        self.first = first
        self._entrypoints: dict[int, str] = {1: first_entrypoint}
        self._handlers: dict[tuple[int, str], Handler] = {}
        self._loading = anyio.Lock()  # one import at a time: they share sys.modules

    async def ensure(self, version: int, code: Claim | None, fetch: Fetch) -> None:
        """Keep ``version``'s sources here, fetching them by ``code`` if need be.

        Raises :class:`SidecarError` (the hub does not give them, or they do
        not match their digest): the frames needing them are then refused,
        and the hub sends them again."""
        if version <= 1 or await self._inbox.get_version(version) is not None:
            return
        if code is None:
            raise WorkflowLoadError(f"version {version} is not here and the hub named no code")
        data = await fetch(code)
        await self._inbox.put_version(version, code.digest, data)
        log.info("kept the sources of version %d (%d bytes)", version, len(data))

    async def load(self, version: int, code: Claim, fetch: Fetch) -> str:
        """``LoadVersion``: fetch, keep and import ``version``; "" when it is
        ready to run, else why not (the hub then refuses the version)."""
        try:
            await self.ensure(version, code, fetch)
            await self.handler(version, None)
        except (SidecarError, TransportError) as exc:
            log.warning("version %d does not load: %s", version, exc)
            return str(exc)
        return ""

    async def handler(self, version: int, entrypoint: str | None) -> Handler:
        """The handler for an item of ``version``: a child run's entrypoint,
        else the version's own. Raises :class:`WorkflowLoadError` or
        :class:`EntrypointError`."""
        version = max(version, 1)
        if entrypoint is None:
            if version == 1:
                return self.first
            entrypoint = self._entrypoints.get(version)
        handler = self._handlers.get((version, entrypoint)) if entrypoint is not None else None
        if handler is None:
            async with self._loading:
                handler = await self._load_handler(version, entrypoint)
        return handler

    async def _load_handler(self, version: int, entrypoint: str | None) -> Handler:
        if version not in self._entrypoints:
            sources = await self._sources(version)
            await _off_the_loop(self._import, version, sources)
        entrypoint = entrypoint or self._entrypoints[version]
        key = (version, entrypoint)
        handler = self._handlers.get(key)  # another task resolved it meanwhile
        if handler is None:
            handler = await _off_the_loop(
                resolve_entrypoint, self._deployment_id, entrypoint, version
            )
            self._handlers[key] = handler
        return handler

    async def migration(self, version: int, entrypoint: str | None) -> StateMigration | None:
        """The ``migrate_state`` hook of the module an item of ``version`` runs in."""
        await self.handler(version, entrypoint)
        version = max(version, 1)
        return state_migration(
            self._deployment_id, entrypoint or self._entrypoints[version], version
        )

    async def _sources(self, version: int) -> Sources:
        kept = await self._inbox.get_version(version)
        if kept is None:
            raise WorkflowLoadError(f"the sources of version {version} are not here")
        try:
            return msgspec.json.decode(kept[1], type=Sources)
        except msgspec.DecodeError as exc:
            raise WorkflowLoadError(
                f"the sources of version {version} do not decode: {exc}"
            ) from None

    def _import(self, version: int, sources: Sources) -> None:
        load_workflow(sources, self._home / "versions" / str(version), self._deployment_id, version)
        self._entrypoints[version] = sources.entrypoint


async def _off_the_loop(call: Callable[..., T], *args: object) -> T:
    # Abandoned on cancellation (a stop): an import that never returns must
    # not hold the process; nothing waits for its result then.
    return await anyio.to_thread.run_sync(call, *args, abandon_on_cancel=True)
