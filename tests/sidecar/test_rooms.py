"""sidecar/ is a house of rooms: SQL only in its storage room, rooms
entered through their package, no folder of more than twelve modules, and
SQLite only through ``runtime.sqlite`` (never aiosqlite, never the hub's
older ``runtime.transact`` and its helpers).

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
MAX_MODULES = 12
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


def test_no_folder_holds_more_than_twelve_modules() -> None:
    folders = {path.parent for path in modules()}
    crowded = {
        str(folder.relative_to(REPO)): count
        for folder in folders
        if (count := len([p for p in folder.glob("*.py") if p.name != "__init__.py"])) > MAX_MODULES
    }
    assert crowded == {}


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


def room_of(module: str) -> str:
    """``sidecar.storage._inbox`` -> ``storage``; a flat module has none."""
    parts = module.split(".")
    room = SIDECAR / parts[1] if len(parts) > 1 else None
    return parts[1] if room is not None and room.is_dir() else ""


def test_imports_are_read_relative_ones_resolved() -> None:
    delivery = {module for _, module, _ in imports(SIDECAR / "link" / "_delivery.py")}
    assert {"sidecar.storage", "sidecar.link._session", "sidecar._errors", "anyio"} <= delivery
    assert (room_of("sidecar.storage._inbox"), room_of("sidecar._errors")) == ("storage", "")


def test_rooms_are_entered_through_their_package() -> None:
    inside = [
        f"{path.relative_to(REPO)}:{line} -> {module}"
        for path in modules()
        for line, module, _ in imports(path)
        if module.startswith("sidecar.")
        and module.count(".") >= 2
        and room_of(module) != room_of(".".join(path.relative_to(REPO).with_suffix("").parts))
    ]
    assert inside == []


def older_sqlite_names() -> set[str]:
    """What ``runtime`` re-exports from its aiosqlite-era modules."""
    tree = ast.parse((REPO / "runtime" / "__init__.py").read_text())
    return {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module in ("_transact", "_sqlite")
        for alias in node.names
    }


def test_sqlite_only_through_runtime_sqlite() -> None:
    older = older_sqlite_names()
    found = [
        f"{path.relative_to(REPO)}:{line}: {module} {sorted(set(names) & older) or ''}"
        for path in modules()
        for line, module, names in imports(path)
        if module.partition(".")[0] == "aiosqlite"
        or module in ("runtime._transact", "runtime._sqlite")
        or (module == "runtime" and set(names) & older)
    ]
    assert found == []
