"""A real PostgreSQL for tests: pgserver's binaries (a wheel), one server
per test session in a short temporary directory (its Unix socket lives
there), and a fresh database per test."""

from __future__ import annotations

import secrets
import shutil
import tempfile
import warnings
from typing import Any

import psycopg


class PostgresServer:
    """Started on construction; :meth:`stop` ends it and removes its files."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="mailrun-pg-")
        with warnings.catch_warnings():
            # platformdirs (imported by pgserver) warns when XDG_RUNTIME_DIR
            # is unset, as in CI.
            warnings.simplefilter("ignore")
            import pgserver  # a dev dependency: only tests start a server

            self._server: Any = pgserver.get_server(self._dir, cleanup_mode=None)
        self._uri: str = self._server.get_uri()

    def url(self, database: str = "postgres") -> str:
        base, _, query = self._uri.partition("?")
        return f"{base.rsplit('/', 1)[0]}/{database}?{query}"

    def new_database(self) -> str:
        """The URL of a new, empty database."""
        name = f"t_{secrets.token_hex(6)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        self._server.cleanup()
        shutil.rmtree(self._dir, ignore_errors=True)
