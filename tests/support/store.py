"""A test's own statements on a hub store, on SQLite or PostgreSQL alike.

A test checks what was persisted, or stages what a crash leaves behind,
with statements of its own: written once (the spelling both databases
take, parameters ``?`` or ``:name``), each declared the first time it runs
(``hub.store.sql``'s ``sql``, so PostgreSQL's parameters are numbered as
the store's are), and run through the store's own reads and transactions.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from hub.store import Store
from hub.store.sql import DECLARED, Params, Row, Statement, sql


@cache
def statement(text: str) -> Statement:
    """``text`` as a statement, kept out of the hub's declared ones."""
    declared = sql(text)
    DECLARED.remove(declared)
    return declared


def _params(params: tuple[Any, ...]) -> Params:
    # One mapping for :name parameters, else the values in order.
    if len(params) == 1 and isinstance(params[0], dict):
        return params[0]  # type: ignore[no-any-return]
    return params


async def read_all(store: Store, text: str, *params: Any) -> list[Row]:
    """Every row of ``text`` as the store gives it (by position and by
    column name), read as the hub reads."""
    return await store.read(lambda tx: tx.fetch_all(statement(text), _params(params)))


async def read_one(store: Store, text: str, *params: Any) -> Row | None:
    """The first row of ``text`` as the store gives it, or None."""
    return await store.read(lambda tx: tx.fetch_one(statement(text), _params(params)))


async def rows(store: Store, text: str, *params: Any) -> list[tuple[Any, ...]]:
    """Every row of ``text``, as tuples, read as the hub reads."""
    found = await store.read(lambda tx: tx.fetch_all(statement(text), _params(params)))
    return [tuple(row) for row in found]


async def row(store: Store, text: str, *params: Any) -> dict[str, Any] | None:
    """The first row of ``text`` by column name, or None."""
    found = await store.read(lambda tx: tx.fetch_one(statement(text), _params(params)))
    return None if found is None else dict(zip(found.keys(), found, strict=True))


async def execute(store: Store, text: str, *params: Any) -> int:
    """``text`` in a write transaction of its own; the rows it changed."""
    return await store.transact(lambda tx: tx.execute(statement(text), _params(params)))
