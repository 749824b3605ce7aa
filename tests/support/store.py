"""A test's own statements on a hub store, on SQLite or PostgreSQL alike.

A test checks what was persisted, or stages what a crash leaves behind,
with statements of its own: written once (the spelling both databases
take, parameters ``?`` or ``:name``), each declared the first time it runs
(``hub.store.sql``'s ``sql``, so PostgreSQL's parameters are numbered as
the store's are), and run through the store's own reads and transactions.
The migrations' names, in order, are here too.
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


MIGRATIONS = (
    "0001_release1_schema",
    "0002_release2_schema",
    "0003_dead_letter_deployment",
    "0004_owner_home",
    "0005_nats_user",
    "0006_retention_indexes",
    "0007_run_step",
    "0008_outbound_mail",
    "0009_workflow_versions",
    "0010_producers",
    "0011_change_feed",
    "0012_raw_message",
    "0013_hub_leases",
    "0014_inline_digest",
    "0015_lease_tables",
    "0016_failure_policies",
    "0017_run_settings",
    "0018_timers",
    "0019_schedules",
    "0020_mail",
    "0021_sleep",
)
"""The hub store's migrations by name, in order, written out (not read from
``hub.store.migrations``): a migration renamed, dropped or reordered fails
the tests that walk them, and a new one is added here, once."""


def migrations_from(first: str) -> list[str]:
    """The migrations a database still needs whose first pending one is ``first``."""
    return list(MIGRATIONS[MIGRATIONS.index(first) :])
