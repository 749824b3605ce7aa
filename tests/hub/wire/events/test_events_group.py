"""The events' group commit on a real store (SQLite and PostgreSQL): bodies
waiting at the same moment share one transaction, each caller gets its own
result; a body that raises takes back only its own writes; a broken commit
fails every caller of its batch; callers still waiting at shutdown are told
so."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import cast

import anyio
import pytest

from hub._errors import HubShuttingDown, StoreUnavailable
from hub.store import Store, Tx, open_store
from hub.store.sql import sql
from hub.wire.events import GroupCommit
from tests.support.store import rows

pytestmark = pytest.mark.anyio

ADD = sql("INSERT INTO producer (id, name, nats_user, created_at) VALUES (?, ?, ?, 0)")


@asynccontextmanager
async def grouped(database: str) -> AsyncIterator[tuple[Store, GroupCommit]]:
    async with await open_store(database) as store:
        group = GroupCommit(store)
        async with anyio.create_task_group() as tg:
            await tg.start(group.run)
            yield store, group
            tg.cancel_scope.cancel()


def adding(name: str, seen: list[int]) -> Callable[[Tx], str]:
    def body(tx: Tx) -> str:
        seen.append(id(tx))
        tx.execute(ADD, (f"prd_{name}", name, f"user-{name}"))
        return name

    return body


async def names(store: Store) -> set[str]:
    return {row[0] for row in await rows(store, "SELECT name FROM producer")}


async def test_bodies_waiting_together_share_one_transaction(database: str) -> None:
    async with grouped(database) as (store, group):
        seen: list[int] = []
        results: dict[str, str] = {}

        async def call(name: str) -> None:
            results[name] = await group.transact(adding(name, seen))

        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(call, f"p{n}")
        assert results == {f"p{n}": f"p{n}" for n in range(8)}
        assert await names(store) == set(results)
        # All eight queued before the committer's first turn: one transaction.
        assert len(set(seen)) == 1


async def test_a_body_that_raises_takes_back_only_its_own_writes(database: str) -> None:
    async with grouped(database) as (store, group):
        seen: list[int] = []

        def broken(tx: Tx) -> str:
            tx.execute(ADD, ("prd_bad", "bad", "user-bad"))
            raise ValueError("a stale fence, say")

        outcomes: dict[str, object] = {}

        async def call(name: str, body: Callable[[Tx], str]) -> None:
            try:
                outcomes[name] = await group.transact(body)
            except ValueError as exc:
                outcomes[name] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "a", adding("a", seen))
            tg.start_soon(call, "bad", broken)
            tg.start_soon(call, "b", adding("b", seen))
        assert outcomes["a"] == "a" and outcomes["b"] == "b"
        assert isinstance(outcomes["bad"], ValueError)
        assert await names(store) == {"a", "b"}
        assert len(set(seen)) == 1  # the three shared one transaction


class BrokenStore:
    """A store whose commit fails (a full disk): only what GroupCommit uses."""

    async def transact(self, body: Callable[[Tx], object], **_: object) -> object:
        raise StoreUnavailable("disk full")


async def test_a_broken_commit_fails_every_caller_of_its_batch() -> None:
    group = GroupCommit(cast(Store, BrokenStore()))
    failures: list[str] = []

    async def call(name: str) -> None:
        try:
            await group.transact(adding(name, []))
        except StoreUnavailable:
            failures.append(name)

    async with anyio.create_task_group() as tg:
        await tg.start(group.run)
        async with anyio.create_task_group() as callers:
            for name in ("alone", "a", "b", "c"):
                callers.start_soon(call, name)
        tg.cancel_scope.cancel()
    assert sorted(failures) == ["a", "alone", "b", "c"]


async def test_callers_waiting_at_shutdown_are_told_so(database: str) -> None:
    async with await open_store(database) as store:
        group = GroupCommit(store)
        async with anyio.create_task_group() as tg:
            await tg.start(group.run)
            tg.cancel_scope.cancel()
        with pytest.raises(HubShuttingDown):
            await group.transact(adding("late", []))
        assert await names(store) == set()
