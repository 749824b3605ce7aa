"""Rollouts: a requested version becomes active once its sidecar has loaded it.

The request is a row (``deployment.rollout_version``), so the driver only
has to look: every ``interval``, and at once when poked (a new request). For
each rollout whose deployment has a current session, it sends ``LoadVersion``
on the sidecar's inbound subject: only the owner answers (it checks the
session id the hub stamped), after it has fetched the sources, kept them in
its inbox and imported them. Its answer settles the rollout in one
transaction (:func:`hub.store.finish_rollout`): active, or refused
with the sidecar's reason; an activation resumes the deployment's
suspended runs in that transaction, and the dispatcher is woken for their
``resume`` items. No answer (no sidecar, a timeout, a hub or
sidecar restart in between) leaves the row as it is, and the next look
tries again; loading twice is harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

import anyio

from runtime import (
    Ack,
    FrameDecoder,
    LoadVersion,
    Reason,
    Subjects,
    Transport,
    VersionLoaded,
    Wakeup,
)

from ...store import Rollout, Store, finish_rollout, pending_rollouts
from ..sessions import SessionTable
from .asking import ask_sidecar

log = logging.getLogger("mailrun.hub.rollout")

_replies: FrameDecoder[VersionLoaded | Ack] = FrameDecoder(VersionLoaded | Ack)


class RolloutDriver:
    def __init__(
        self,
        *,
        store: Store,
        transport: Transport,
        subjects: Subjects,
        sessions: SessionTable,
        interval: float = 1.0,
        timeout: float = 10.0,
        on_activated: Callable[[set[str]], object] = lambda deployment_ids: None,
    ) -> None:
        self._store = store
        self._transport = transport
        self._subjects = subjects
        self._sessions = sessions
        self._interval = interval
        self._timeout = timeout
        """How long a sidecar may take to fetch and import a version."""
        self._on_activated = on_activated
        """Called with the deployment whose version became active (it may
        have resume items to send)."""
        self._wake = Wakeup()
        self._busy: set[str] = set()

    def poke(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                await self._wake.wait(self._interval)
                try:
                    rollouts = await self._store.read(pending_rollouts)
                except Exception:
                    log.exception("cannot read the pending rollouts")
                    continue
                for rollout in rollouts:
                    if rollout.deployment_id not in self._busy:
                        self._busy.add(rollout.deployment_id)
                        tg.start_soon(self._roll, rollout)

    async def _roll(self, rollout: Rollout) -> None:
        try:
            await self._try(rollout)
        except Exception:
            log.exception("rollout of %s v%d failed", rollout.deployment_id, rollout.version)
        finally:
            self._busy.discard(rollout.deployment_id)

    async def _try(self, rollout: Rollout) -> None:
        dep = rollout.deployment_id
        session = self._sessions.current(dep)
        if session is None:
            return  # its sidecar is not here: looked at again when it is
        frame = LoadVersion(
            session_id=session.session_id, version=rollout.version, code=rollout.code
        )
        what = f"rollout of v{rollout.version}"
        reply = await ask_sidecar(
            self._transport, self._subjects, dep, frame, _replies, self._timeout, what
        )
        if reply is None:
            return
        error: str | None
        if isinstance(reply, Ack):
            # An older sidecar refuses a frame it does not know.
            if reply.reason != Reason.DECODE_ERROR:
                return
            error = "the sidecar's release cannot load workflow versions: upgrade it first"
        elif reply.deployment_id not in ("", dep):
            return
        else:
            error = reply.error or None
        settled = await self._store.transact(
            partial(finish_rollout, deployment_id=dep, version=rollout.version, error=error)
        )
        if settled and error is None:
            self._on_activated({dep})
            log.info("deployment %s runs version %d from now on", dep, rollout.version)
        elif settled:
            log.warning("version %d of %s refused: %s", rollout.version, dep, error)
