"""Child run minting (``hub.mint``): the answer to a sidecar's MintChild.

The child is minted by the store (``hub.store``'s ``mint_child``), fenced by
the session's epoch: one conditional INSERT that matches only a live,
non-terminal parent of the caller's deployment whose anchor is live, so
nothing is created for a run or deployment that ended meanwhile. The
sidecar's ``request_id`` makes a retried mint return the first child. A
parent that took no child is refused with what it is now.
"""

from __future__ import annotations

from functools import partial

from runtime import FrameDecoder, MintChild, Minted, Reason, Refused, afailpoint, is_terminal
from runtime.wire import anchor_is_live

from ...store import MintParent, Store, mint_child
from ..sessions import SessionTable


class MintHandler:
    """Answers ``hub.mint`` with Minted or Refused."""

    def __init__(self, *, store: Store, sessions: SessionTable) -> None:
        self._store = store
        self._sessions = sessions
        self._decoder: FrameDecoder[MintChild] = FrameDecoder(MintChild)

    async def __call__(self, data: bytes, sender: str | None) -> Minted | Refused:
        req = self._decoder.decode(data)
        session = self._sessions.check(
            req.session_id, req.deployment_id, req.owner_epoch, sender=sender
        )
        dep = session.deployment_id
        if not req.request_id:
            return Refused(reason=Reason.INVALID_REQUEST, detail="request_id is required")
        # Admitted, not created: the parent may end or its deployment be
        # deleted here; the fence and the conditional INSERT see to that.
        await afailpoint("hub.mint.before_claim")
        minted = await self._store.transact(
            partial(
                mint_child,
                fence=self._sessions.fence(dep, req.owner_epoch),
                parent_run_id=req.parent_run_id,
                request_id=req.request_id,
            )
        )
        if isinstance(minted, str):
            return Minted(run_id=minted)
        return _why_not(minted, req.parent_run_id, dep)


def _why_not(parent: MintParent | None, parent_run_id: str, deployment_id: str) -> Refused:
    """Name the reason the parent took no child (None: there is no such parent)."""
    if parent is None:
        return Refused(reason=Reason.UNKNOWN_RUN, detail=parent_run_id)
    if parent.deleted_at is not None or not anchor_is_live(parent.anchor or ""):
        return Refused(reason=Reason.DEPLOYMENT_NOT_LIVE, detail=deployment_id)
    if is_terminal(parent.status):
        return Refused(reason=Reason.WORKFLOW_RUN_TERMINAL, detail=parent_run_id)
    return Refused(reason=Reason.PARENT_NOT_LIVE, detail=f"{parent_run_id} is {parent.status}")
