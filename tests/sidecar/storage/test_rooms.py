"""sidecar/'s store room: SQL only in ``sidecar/storage/``, and SQLite only
through ``runtime.sqlite`` and the standard library's ``sqlite3`` (never an
asyncio wrapper such as aiosqlite). The rules every package keeps (rooms
entered through their package, at most a dozen modules a folder) are
tests/test_architecture.py's.

Read from the source with ``ast``: nothing is imported.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.support import REPO

SIDECAR = REPO / "sidecar"
STORAGE = SIDECAR / "storage"
SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE TABLE|ALTER TABLE|PRAGMA)\b")


def modules(root: Path = SIDECAR) -> list[Path]:
    return sorted(root.rglob("*.py"))


def strings(path: Path) -> Iterator[tuple[int, str]]:
    """Every string constant of a module (docstrings and f-strings' parts
    included), with its line."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def sql_in(paths: list[Path]) -> list[str]:
    """``file:line: keyword in text`` for every string constant holding SQL."""
    return [
        f"{path.name}:{line}: {found.group(0)} in {text[:60]!r}"
        for path in paths
        for line, text in strings(path)
        if (found := SQL.search(text))
    ]


def test_no_sql_outside_the_storage_room() -> None:
    outside = [path for path in modules() if not path.is_relative_to(STORAGE)]
    assert sql_in(outside) == []


def test_the_scan_finds_sql_where_it_is(tmp_path: Path) -> None:
    found = {entry.partition(":")[0] for entry in sql_in(modules(STORAGE))}
    assert {"_schema.py", "_step.py", "_outbox.py", "_intake.py", "_queue.py"} <= found
    stray = tmp_path / "stray.py"
    stray.write_text('"""Docs."""\n\nQUERY = f"SELECT {1} FROM t"\n')
    assert sql_in([stray]) == ["stray.py:3: SELECT in 'SELECT '"]


def imports(path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """``(line, absolute module, names)`` of every import statement of a
    sidecar module (relative ones resolved)."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    package = parts[:-1]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, module, [alias.name for alias in node.names]


def test_imports_are_read_relative_ones_resolved() -> None:
    inbox = {(module, *names) for _, module, names in imports(STORAGE / "inbox" / "_inbox.py")}
    sqlite = ("Database", "Synchronous")
    assert ("runtime.sqlite", *sqlite) in inbox
    assert ("sidecar.storage._schema", "migrate") in inbox
    assert ("anyio",) in inbox


def test_sqlite_only_through_runtime_sqlite() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in modules()
        for line, module, _ in imports(path)
        if module.partition(".")[0] == "aiosqlite"
    ]
    assert found == []
