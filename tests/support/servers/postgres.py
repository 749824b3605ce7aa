"""A real PostgreSQL for tests: pgserver's binaries (a wheel), one server
per test session in a short temporary directory (its Unix socket lives
there), and a fresh database per test."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
import warnings
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import asyncpg

from ..store import statement

T = TypeVar("T")


def run_apart(coro: Coroutine[Any, Any, T]) -> T:
    """``coro`` to its end on an event loop of its own, in a thread: for
    synchronous helpers that tests call from inside their own loop."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def query(url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """``sql`` (written for both databases, ``?`` parameters) on the database at ``url``."""

    async def run() -> list[tuple[Any, ...]]:
        declared = statement(sql)
        conn = await asyncpg.connect(url)
        try:
            return [tuple(row) for row in await conn.fetch(declared.postgres, *declared.args(args))]
        finally:
            await conn.close()

    return run_apart(run())


class PostgresServer:
    """Started on construction; :meth:`stop` ends it and removes its files."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="mailrun-pg-")
        with warnings.catch_warnings():
            # platformdirs (imported by pgserver) warns when XDG_RUNTIME_DIR
            # is unset, as in CI.
            warnings.simplefilter("ignore")
            import pgserver  # a dev dependency: only tests start a server

            self._server: Any = pgserver.get_server(self._dir, cleanup_mode="delete")
        self._uri: str = self._server.get_uri()
        run_apart(self._throwaway())

    async def _throwaway(self) -> None:
        """No fsync: the server's files die with the test run, and no test
        crashes the machine under it. With it, the shutdown checkpoint
        after a run's databases took 6-20 s (load 4-5), paid in the
        teardown of whichever test ran last on a worker (docs/testing.md)."""
        conn = await asyncpg.connect(self.url())
        try:
            await conn.execute("ALTER SYSTEM SET fsync = off")
            await conn.execute("ALTER SYSTEM SET synchronous_commit = off")
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()

    def url(self, database: str = "postgres") -> str:
        base, _, query_string = self._uri.partition("?")
        return f"{base.rsplit('/', 1)[0]}/{database}?{query_string}"

    def new_database(self) -> str:
        """The URL of a new, empty database."""
        name = f"t_{secrets.token_hex(6)}"

        async def create() -> None:
            conn = await asyncpg.connect(self.url())
            try:
                # Copies the template's files, not its pages through the WAL
                # (PostgreSQL 15's default): half the time without fsync.
                await conn.execute(f"CREATE DATABASE {name} STRATEGY FILE_COPY")
            finally:
                await conn.close()

        run_apart(create())
        return self.url(name)

    def stop(self) -> None:
        self._server.cleanup()
        shutil.rmtree(self._dir, ignore_errors=True)
