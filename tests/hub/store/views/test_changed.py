"""What a listing with ``changed_after`` reads (``hub.store.deployments_changed``),
on either database: the whole listing and a cursor for 0, then only the
deployments whose shown status changed after a cursor (created, paused,
asleep, deleted), and the whole listing again for a cursor the database
never gave. On PostgreSQL (several hubs may write) a cursor does not pass a
change younger than ``FEED_HOLD`` while an older one may still commit
below it, and lists such a change again on the next poll: the test follows
the cursor until an answer is empty."""

from __future__ import annotations

from functools import partial

import pytest

from hub.store import (
    FEED_HOLD,
    Store,
    delete_deployment,
    deployments_changed,
    grant_sleep,
    open_store,
    pause_deployment,
)
from tests.support import wait_for
from tests.support.harnesses.wire import deploy

from ..sessions.test_sleep import fence

pytestmark = pytest.mark.anyio


async def changed(store: Store, after: int) -> tuple[dict[str, str], int, bool]:
    answer = await store.read(partial(deployments_changed, after=after, shared=store.shared))
    return {d.id: d.status for d in answer.deployments}, answer.cursor, answer.whole


async def follow(store: Store, after: int) -> tuple[dict[str, str], int]:
    """Follow the cursor from ``after`` until an answer lists nothing: what
    the answers showed (a later view of a deployment over an earlier one)
    and the cursor reached."""
    seen: dict[str, str] = {}

    async def quiet() -> int | None:
        nonlocal after
        shown, cursor, whole = await changed(store, after)
        assert cursor >= after and (not whole or after == 0)  # 0: none settled yet
        seen.update(shown)
        after = cursor
        return None if shown else cursor

    reached = await wait_for(quiet, timeout=FEED_HOLD + 20, what="the feed to settle")
    return seen, reached


async def test_a_cursor_follows_what_changed_since(database: str) -> None:
    async with await open_store(database) as store:
        kept, paused, sleepy, gone = [
            await deploy(store, n) for n in ("kept", "paused", "sleepy", "gone")
        ]
        shown, cursor, whole = await changed(store, 0)
        assert whole and set(shown) == {kept.id, paused.id, sleepy.id, gone.id}
        assert set(shown.values()) == {"deployed"}
        again, cursor = await follow(store, cursor)
        assert set(again.values()) <= {"deployed"}  # a change not yet settled, listed again

        assert await store.transact(partial(pause_deployment, deployment_id=paused.id))
        assert await store.transact(partial(grant_sleep, fence=await fence(store, sleepy))) is None
        assert await delete_deployment(store, gone.id)
        shown, later = await follow(store, cursor)
        assert later > cursor
        assert shown == {paused.id: "paused", sleepy.id: "asleep", gone.id: "deleted"}
        # A cursor past the last change is another database's: all of them.
        shown, _, whole = await changed(store, later + 1000)
        assert whole and len(shown) == 4
