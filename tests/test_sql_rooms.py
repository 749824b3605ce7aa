"""SQL lives in the store rooms: ``hub/store/`` (the hub's database),
``sidecar/storage/`` (a sidecar's inbox) and, for pragmas and transaction
control only, ``runtime/sqlite/``. Every other module of ``runtime/``,
``hub/`` and ``sidecar/`` calls the rooms' functions and holds no SQL text.

SQL text is found in the source's string constants, read with ``ast``
(nothing is imported): each literal, and each f-string with its
placeholders stood in for, is matched against statements' shapes
(upper-case keywords followed by what a statement has there, so prose that
mentions a ``SELECT`` or a COMMIT does not count).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO

PACKAGES = ("runtime", "hub", "sidecar")

STATEMENT = re.compile(
    r"""\b(?:
        SELECT\s+(?:DISTINCT\s+)?[\w*(][^;]*?\sFROM\s+[\w(]
      | INSERT\s+(?:OR\s+\w+\s+)?INTO\s+\w
      | UPDATE\s+\w+\s+SET\s
      | DELETE\s+FROM\s+\w
      | CREATE\s+(?:TABLE|(?:UNIQUE\s+)?INDEX|TRIGGER|VIEW)\s
      | ALTER\s+TABLE\s+\w
    )""",
    re.VERBOSE,
)
"""A statement of a schema or its data: the stores' own."""

PRAGMA = re.compile(r"\s*PRAGMA\s+(?:\w+\.)?\w+\s*(?:=\s*[\w'\"-]+|\([^)]*\))?\s*;?\s*")
"""A connection's setting (``runtime/sqlite`` sets a store's up), a string
that is nothing else."""

CONTROL = re.compile(
    r"\s*(?:BEGIN(?:\s+(?:IMMEDIATE|EXCLUSIVE|DEFERRED))?|COMMIT|ROLLBACK(?:\s+TO\s+\w+)?"
    r"|SAVEPOINT\s+\w+|RELEASE\s+\w+)\s*;?\s*"
)
"""Transaction control, a string that is nothing else (in prose it is not SQL)."""

ROOMS = ("hub/store/", "sidecar/storage/")
"""Where any SQL may be."""

SETTINGS_ROOM = "runtime/sqlite/"
"""Where pragmas and transaction control may be, and nothing else."""


def strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Each string constant of ``tree`` (line, text); an f-string whole,
    a stand-in for each placeholder."""
    parts: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = []
            for value in node.values:
                parts.add(id(value))
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    text.append(value.value)
                else:
                    text.append("x")
            yield node.lineno, "".join(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            yield node.lineno, node.value


def kinds(text: str) -> set[str]:
    """What SQL ``text`` holds: ``statement``, ``pragma``, ``control``."""
    found = set()
    if STATEMENT.search(text):
        found.add("statement")
    if PRAGMA.fullmatch(text):
        found.add("pragma")
    if CONTROL.fullmatch(text):
        found.add("control")
    return found


def sql_in(path: Path) -> list[tuple[int, set[str], str]]:
    """Every string constant of the module at ``path`` that holds SQL."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return sorted((line, found, text) for line, text in strings(tree) if (found := kinds(text)))


def modules() -> list[str]:
    return [
        path.relative_to(REPO).as_posix()
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    ]


def room_for(module: str, found: set[str]) -> str:
    """Where ``found`` SQL of ``module`` belongs."""
    if module.startswith("sidecar/"):
        return "sidecar/storage/"
    if module.startswith("hub/"):
        return "hub/store/"
    if "statement" in found:
        return "the store whose schema it reads (hub/store/, sidecar/storage/):" + (
            " runtime/sqlite/ holds pragmas and transaction control only"
        )
    return "runtime/sqlite/"


def misplaced(module: str) -> list[str]:
    """What of ``module``'s SQL is outside its room, one line each."""
    if module.startswith(ROOMS):
        return []
    allowed = {"pragma", "control"} if module.startswith(SETTINGS_ROOM) else set()
    return [
        f"{module}:{line}: {' and '.join(sorted(found - allowed))} {text.strip()[:60]!r}:"
        f" move it to {room_for(module, found - allowed)}"
        for line, found, text in sql_in(REPO / module)
        if found - allowed
    ]


def test_no_sql_outside_the_store_rooms() -> None:
    found = [line for module in modules() for line in misplaced(module)]
    assert found == [], "SQL outside the store rooms:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        "SELECT id FROM run_event WHERE id = ?",
        """
SELECT d.id, d.run_id,
       COALESCE(d.version, 1) AS version
FROM workflow_run_dispatch d
""",
        "SELECT COUNT(*) FROM producer",
        "SELECT EXISTS (SELECT 1 FROM blob)",
        "INSERT OR IGNORE INTO run_event (id) VALUES (?)",
        "INSERT INTO hub_node (id) VALUES (?) ON CONFLICT (id) DO NOTHING",
        "UPDATE workflow_run SET status = ? WHERE id = ?",
        "DELETE FROM dead_letter WHERE id <= ?",
        "CREATE UNIQUE INDEX x ON t (a)",
        "CREATE TABLE t (a TEXT)",
        "ALTER TABLE inbox ADD COLUMN run_id TEXT",
        "PRAGMA busy_timeout = 0",
        "PRAGMA wal_checkpoint(PASSIVE)",
        "PRAGMA table_info(inbox)",
        "BEGIN IMMEDIATE",
        "ROLLBACK TO accept",
    ],
)
def test_the_patterns_see_a_statement(text: str) -> None:
    assert kinds(text)


@pytest.mark.parametrize(
    "text",
    [
        "Select the rows that are due, then mark them sent.",
        "a SELECT's read transaction lasts from its first step",
        "Each ``SELECT ... FROM`` here reads one index range.",
        "one conditional ``INSERT ... SELECT`` that matches only a live parent",
        "A RunEvents frame is acknowledged after COMMIT.",
        "``BEGIN IMMEDIATE`` takes SQLite's write lock up front",
        "``DELETE /producers/{id or name}`` (idempotent)",
        "UPDATE: the run's row, once per batch",
        "the ``PRAGMA`` that sets it",
        "``PRAGMA synchronous`` as a store may run: ``FULL`` (the default)",
        "a select from the list of deployments",
    ],
)
def test_the_patterns_let_prose_be(text: str) -> None:
    assert kinds(text) == set()


def test_an_f_string_is_read_whole() -> None:
    tree = ast.parse('sql = f"UPDATE {table} SET a = ? WHERE id IN ({marks})"')
    assert [kinds(text) for _, text in strings(tree)] == [{"statement"}]


def test_the_scan_sees_the_rooms_sql() -> None:
    """Not blind: the statements of the rooms are found (and allowed)."""
    assert sql_in(REPO / "hub/store/delivery/sending.py")
    schema = sql_in(REPO / "hub/store/schema/release_one.py")
    assert any("statement" in found for _, found, _ in schema)
    settings = sql_in(REPO / "runtime/sqlite/_settings.py")
    assert settings and all(found <= {"pragma", "control"} for _, found, _ in settings)
    assert misplaced("runtime/sqlite/_settings.py") == []
