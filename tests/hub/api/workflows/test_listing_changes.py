"""``GET /workflows/deployments?changed_after=C``: the deployments changed
after the answer that gave ``cursor`` C (what ``mailrun up`` polls), the
whole listing for 0 or a cursor the feed can no longer follow, on the app
over a real SQLite store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hub.store import trim_changes

from ..harness import Api, api, assert_error

pytestmark = pytest.mark.anyio


async def changed(a: Api, after: int) -> tuple[dict[str, str], int, bool]:
    r = await a.client.get(f"/workflows/deployments?changed_after={after}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    shown = {d["id"]: d["status"] for d in body["deployments"]}
    return shown, body["cursor"], body["whole"]


async def test_a_listing_after_a_cursor_has_what_changed_since(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        # Nothing yet: the whole (empty) listing, and a cursor to go on from.
        assert await changed(a, 0) == ({}, 0, True)
        kept, paused, deleted = (
            await a.deploy("kept"),
            await a.deploy("paused"),
            await a.deploy("gone"),
        )
        shown, cursor, whole = await changed(a, 0)
        assert whole and shown == {d["id"]: "deployed" for d in (kept, paused, deleted)}
        assert cursor > 0
        # Nothing changed since: nothing listed, the same cursor.
        assert await changed(a, cursor) == ({}, cursor, False)
        # Three changes: a pause, a deletion, a new deployment.
        r = await a.client.post(f"/workflows/deployments/{paused['id']}/pause")
        assert r.status_code == 200, r.text
        r = await a.client.delete(f"/workflows/deployments/{deleted['id']}")
        assert r.status_code == 200, r.text
        new = await a.deploy("new")
        shown, after, whole = await changed(a, cursor)
        assert not whole and after > cursor
        assert shown == {paused["id"]: "paused", deleted["id"]: "deleted", new["id"]: "deployed"}
        # Mail to a deployment is no change of what it is shown as.
        assert (await a.send(kept["address"])).status_code == 202
        assert (await changed(a, after))[0] == {}


async def test_a_cursor_the_feed_cannot_follow_gets_the_whole_listing(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        first = await a.deploy("first")
        _, cursor, _ = await changed(a, 0)
        second = await a.deploy("second")
        # Past this database's last change: another database's cursor.
        shown, again, whole = await changed(a, cursor + 1000)
        assert whole and set(shown) == {first["id"], second["id"]} and again > cursor
        # The changes after it trimmed away: what changed is not known.
        await a.deploy("third")
        await trim_changes(a.store, keep=1)
        shown, _, whole = await changed(a, cursor)
        assert whole and len(shown) == 3


async def test_a_cursor_must_be_a_whole_number_without_a_status(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        for bad in ("-1", "soon", "1.5", "9" * 30):
            r = await a.client.get(f"/workflows/deployments?changed_after={bad}")
            assert_error(r, 422, "invalid_request")
        r = await a.client.get("/workflows/deployments?changed_after=0&status=deployed")
        assert_error(r, 422, "invalid_request")
        # Without it, the listing is as it always was.
        r = await a.client.get("/workflows/deployments")
        assert r.status_code == 200 and r.json() == {"deployments": []}
