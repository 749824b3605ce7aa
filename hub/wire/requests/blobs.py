"""Claim-checked bodies and version sources: chunked reads (``hub.blob``,
through the store's blob reader, ``store/blob_io.py``) and garbage collection
(the store's ``collect_blobs``, on a timer and when poked)."""

from __future__ import annotations

import logging
from functools import partial

from runtime import BlobChunk, BlobGet, FrameDecoder, Reason, Refused, Wakeup
from runtime.wire import BLOB_CHUNK_SIZE

from ...store import Store, blob_named, collect_blobs, trim_changes
from ..sessions import SessionTable

log = logging.getLogger("mailrun.hub.blobs")

GC_INTERVAL = 30.0


class BlobCollector:
    """Runs the store's ``collect_blobs`` every ``interval`` seconds and soon after a
    poke, trims the change feed to its newest ``changes_kept`` rows (None:
    not at all), then gives free pages beyond ``free_bytes_kept`` back."""

    def __init__(
        self,
        store: Store,
        *,
        interval: float = GC_INTERVAL,
        free_bytes_kept: int | None = None,
        changes_kept: int | None = None,
    ) -> None:
        self._store = store
        self._interval = interval
        self._free_bytes_kept = free_bytes_kept
        self._changes_kept = changes_kept
        self._poke = Wakeup()

    def poke(self) -> None:
        self._poke.set()

    async def run(self) -> None:
        while True:
            await self._poke.wait(self._interval)
            try:
                # Heavy: deleting large blobs (zeroed as they go, secure_delete)
                # may take long enough to hold up every request if it ran on
                # the loop.
                deleted, left = await self._store.transact(collect_blobs, heavy=True)
                if self._changes_kept is not None:
                    await trim_changes(self._store, self._changes_kept)
                if (keep := self._free_bytes_kept) is not None:
                    # What collection and trimming freed goes back to the file
                    # system: down to ``keep`` once no body is in flight.
                    await self._store.release_free_pages(keep, slack=keep if left else 0)
            except Exception:
                log.exception("blob collection failed")
                continue
            if deleted:
                log.info("collected %d blob(s)", deleted)


class BlobHandler:
    """Answers ``hub.blob``: BlobChunk, or Refused unknown_blob / bad_offset."""

    def __init__(self, *, store: Store, sessions: SessionTable) -> None:
        self._store = store
        self._sessions = sessions
        self._reader = store.blob_reader()
        self._decoder: FrameDecoder[BlobGet] = FrameDecoder(BlobGet)

    async def __call__(self, data: bytes, sender: str | None) -> BlobChunk | Refused:
        get = self._decoder.decode(data)
        session = self._sessions.check(get.session_id, get.deployment_id, sender=sender)
        if get.offset < 0:
            return Refused(reason=Reason.BAD_OFFSET, detail=f"offset {get.offset}")
        # A sidecar reads only bodies of its own deployment's dispatches,
        # and the code of its own deployment's versions.
        named = await self._store.read(
            partial(blob_named, digest=get.digest, deployment_id=session.deployment_id)
        )
        found = await self._reader.read(get.digest, get.offset, BLOB_CHUNK_SIZE) if named else None
        if found is None:
            return Refused(reason=Reason.UNKNOWN_BLOB, detail=get.digest)
        size, chunk = found
        if get.offset >= size and not (get.offset == 0 and size == 0):
            return Refused(reason=Reason.BAD_OFFSET, detail=f"offset {get.offset} of {size} bytes")
        return BlobChunk(digest=get.digest, offset=get.offset, size=size, data=chunk)

    def close(self) -> None:
        self._reader.close()
