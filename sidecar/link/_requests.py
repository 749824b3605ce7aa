"""The requests a sidecar makes to the hub under its session: a claim-checked
body fetched and verified, a child run minted, leave to sleep, and the runs'
state a Welcome asks it to adopt.

Each goes through the link's ``request`` (transport trouble is
:class:`HubUnavailable`; a refusal that says the session is gone makes the
link say hello again), stamped with the session it must hold.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from runtime import (
    Asleep,
    BlobChunk,
    BlobGet,
    Claim,
    FrameDecoder,
    MintChild,
    Minted,
    Refused,
    RunSnapshot,
    RunStates,
    Sleep,
    StateGet,
    Subjects,
    Welcome,
)

from .._errors import BlobError, DigestMismatch, HubRefused
from ._hello import Ask, Identity, Session


class HubRequests:
    """The requests, each made with the collaborators the link hands in: its
    ``request``, its session (``require_session`` raises
    :class:`HubUnavailable` before the first), its identity and subjects."""

    def __init__(
        self,
        *,
        request: Ask,
        require_session: Callable[[], Session],
        identity: Identity,
        subjects: Subjects,
        request_timeout: float,
    ) -> None:
        self.request = request
        self._require_session = require_session
        self.identity = identity
        self.subjects = subjects
        self._request_timeout = request_timeout

    async def fetch_blob(self, claim: Claim) -> bytes:
        """Fetch a claim-checked body chunk by chunk and verify size and sha256."""
        session = self._require_session()
        decoder: FrameDecoder[BlobChunk | Refused] = FrameDecoder(BlobChunk | Refused)
        data = bytearray()
        while len(data) < claim.size:
            get = BlobGet(
                digest=claim.digest,
                offset=len(data),
                deployment_id=self.identity.deployment_id,
                session_id=session.session_id,
            )
            reply = await self.request(self.subjects.blob, get, decoder, self._request_timeout)
            if isinstance(reply, Refused):
                raise BlobError(f"blob {claim.digest}: hub refused: {reply.reason}")
            if reply.offset != len(data) or reply.size != claim.size or not reply.data:
                raise DigestMismatch(
                    f"blob {claim.digest}: chunk at {reply.offset} of {reply.size} bytes"
                    f" does not continue {len(data)} of {claim.size}"
                )
            data += reply.data
        actual = "sha256:" + hashlib.sha256(data).hexdigest()
        if len(data) != claim.size or actual != claim.digest:
            raise DigestMismatch(f"blob {claim.digest}: got {len(data)} bytes hashing to {actual}")
        return bytes(data)

    async def mint_child(self, parent_run_id: str, request_id: str) -> str:
        """Ask the hub to mint a child run (idempotent per request id)."""
        session = self._require_session()
        mint = MintChild(
            parent_run_id=parent_run_id,
            request_id=request_id,
            deployment_id=self.identity.deployment_id,
            session_id=session.session_id,
            owner_epoch=session.owner_epoch,
        )
        decoder: FrameDecoder[Minted | Refused] = FrameDecoder(Minted | Refused)
        reply = await self.request(self.subjects.mint, mint, decoder, self._request_timeout)
        if isinstance(reply, Refused):
            raise HubRefused(reply.reason, reply.detail)
        run_id: str = reply.run_id
        return run_id

    async def sleep(self) -> Asleep | Refused:
        """Ask the hub to let this process stop (``Sleep``): Asleep when it
        granted it, else its refusal (``busy``, or one that makes the link
        say hello again). Raises :class:`HubUnavailable`."""
        session = self._require_session()
        sleep = Sleep(
            deployment_id=self.identity.deployment_id,
            session_id=session.session_id,
            owner_epoch=session.owner_epoch,
        )
        decoder: FrameDecoder[Asleep | Refused] = FrameDecoder(Asleep | Refused)
        reply: Asleep | Refused = await self.request(
            self.subjects.sleep, sleep, decoder, self._request_timeout
        )
        return reply

    async def fetch_state(self, welcome: Welcome) -> tuple[list[RunSnapshot], int, list[int]]:
        """Every run's state as the hub applied it, the hub's floor seq and the
        seqs above it that are settled (RunStates), asked under ``welcome``'s
        session (not the session yet: the sidecar adopts this state before it
        acts as the owner)."""
        decoder: FrameDecoder[RunStates | Refused] = FrameDecoder(RunStates | Refused)
        runs: list[RunSnapshot] = []
        after, floor = "", welcome.floor_seq
        while True:
            get = StateGet(
                deployment_id=self.identity.deployment_id,
                session_id=welcome.session_id,
                owner_epoch=welcome.owner_epoch,
                after_run_id=after,
            )
            reply = await self.request(self.subjects.state, get, decoder, self._request_timeout)
            if isinstance(reply, Refused):
                raise HubRefused(reply.reason, reply.detail)
            runs.extend(reply.runs)
            floor = reply.floor_seq
            if not reply.more or not reply.runs:
                return runs, floor, reply.settled
            after = reply.runs[-1].run_id
