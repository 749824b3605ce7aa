"""The sidecar's workflow code by version (``sidecar.execution.code``): fetched once,
kept in the inbox, imported side by side, refused with a reason."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import msgspec
import pytest

from runtime import Claim, Sources
from sidecar._errors import BlobError
from sidecar.execution import Versions
from sidecar.storage import Inbox

pytestmark = pytest.mark.anyio

FLOW = """
TAG = {tag}


async def main(ctx, item):
    ctx.state["tag"] = TAG
{extra}
"""


def code(tag: int, extra: str = "", entrypoint: str = "flow:main") -> tuple[Claim, bytes]:
    files = {"flow.py": FLOW.format(tag=tag, extra=extra)}
    data = msgspec.json.encode(Sources(entrypoint=entrypoint, files=files))
    return Claim(digest="sha256:" + hashlib.sha256(data).hexdigest(), size=len(data)), data


class Hub:
    """Gives the blobs it holds, and counts what was asked of it."""

    def __init__(self, *blobs: tuple[Claim, bytes]) -> None:
        self.blobs = {claim.digest: data for claim, data in blobs}
        self.fetched: list[str] = []

    async def fetch(self, claim: Claim) -> bytes:
        self.fetched.append(claim.digest)
        if claim.digest not in self.blobs:
            raise BlobError(f"blob {claim.digest}: hub refused: unknown_blob")
        return self.blobs[claim.digest]


async def first(ctx: Any, item: Any) -> None:
    ctx.state["tag"] = 1


def versions(inbox: Inbox, home: Path) -> Versions:
    return Versions(
        inbox=inbox, deployment_id="dep_" + "7e" * 13, home=home, first=first,
        first_entrypoint="flow:main",
    )  # fmt: skip


class Ctx:
    def __init__(self) -> None:
        self.state: dict[str, Any] = {}


async def tag_of(v: Versions, version: int) -> Any:
    ctx = Ctx()
    await (await v.handler(version, None))(ctx, None)
    return ctx.state["tag"]


async def test_a_version_is_fetched_once_kept_and_run_beside_the_first(tmp_path: Path) -> None:
    two = code(2)
    hub = Hub(two)
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        v = versions(inbox, tmp_path)
        await v.ensure(2, two[0], hub.fetch)
        await v.ensure(2, two[0], hub.fetch)
        assert hub.fetched == [two[0].digest]
        assert (await tag_of(v, 1), await tag_of(v, 2), await tag_of(v, 0)) == (1, 2, 1)
    finally:
        await inbox.aclose()
    # Kept: a restarted sidecar runs version 2 without the hub.
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        assert await tag_of(versions(inbox, tmp_path), 2) == 2
    finally:
        await inbox.aclose()


async def test_a_version_that_does_not_load_is_refused_with_the_reason(tmp_path: Path) -> None:
    broken = code(2, extra="def (")
    headless = code(3, entrypoint="flow:absent")
    hub = Hub(broken, headless)
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        v = versions(inbox, tmp_path)
        assert "SyntaxError" in await v.load(2, broken[0], hub.fetch)
        assert "has no 'absent'" in await v.load(3, headless[0], hub.fetch)
        missing = Claim(digest="sha256:" + "0" * 64, size=10)
        assert "unknown_blob" in await v.load(4, missing, hub.fetch)
        assert await inbox.get_version(4) is None
        good = code(5)
        hub.blobs[good[0].digest] = good[1]
        assert await v.load(5, good[0], hub.fetch) == ""
        assert await tag_of(v, 5) == 5
    finally:
        await inbox.aclose()


async def test_each_version_has_its_own_migrate_state(tmp_path: Path) -> None:
    hook = "\n\nasync def migrate_state(state, from_version):\n    return state\n"
    two, three = code(2, extra=hook), code(3)
    inbox = await Inbox.open(tmp_path / "inbox.db")
    try:
        v = versions(inbox, tmp_path)
        for version, (claim, _) in ((2, two), (3, three)):
            await v.ensure(version, claim, Hub(two, three).fetch)
        migrate = await v.migration(2, None)
        assert migrate is not None and await migrate({"a": 1}, 1) == {"a": 1}
        assert await v.migration(3, None) is None
    finally:
        await inbox.aclose()
