"""Statement: one SQL statement of the hub, declared once for each database.

A module of ``hub/store/`` declares its statements at its top level, each
with :func:`sql`: the text for SQLite, and for PostgreSQL either the same
text or, where the two databases spell something differently (``INSERT OR
IGNORE``, a row lock, a JSON array of ids, ``LEAST``), a text of its own
given beside it. Both are fixed when the module is imported; nothing
rewrites a statement when it runs.

Parameters are written the same way in both texts: ``?`` or ``?N``
(positional, a sequence of values; ``?N`` is the N-th, 1-based) or
``:name`` (a mapping). SQLite takes them as they
are. PostgreSQL's driver numbers them (``$1``, ``$2``...): the declaration
numbers the PostgreSQL text once, and keeps the names in the order of
their numbers, so a mapping becomes its arguments with no parsing at run
time. Every declared statement is prepared on both databases by the
store's tests (``tests/hub/store/sql/test_statements.py``), so a spelling one
of them does not take fails there, not in production.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias

import msgspec

Params: TypeAlias = Sequence[object] | Mapping[str, object]
"""Positional (``?``) or named (``:name``) parameters."""

# Quoted text and ``::`` casts are kept as they are; ``?`` and ``:name`` are parameters.
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|::|\?\d*|:[A-Za-z_]\w*")

DECLARED: list[Statement] = []
"""Every statement declared with :func:`sql`, in declaration order (what the
tests prepare on both databases)."""


class Statement:
    """A statement's text for SQLite and for PostgreSQL (parameters numbered),
    and how a mapping's values become PostgreSQL's arguments."""

    __slots__ = ("module", "names", "postgres", "sqlite")

    def __init__(
        self, sqlite: str, postgres: str, names: tuple[str, ...] | None, module: str = ""
    ) -> None:
        self.sqlite = sqlite
        self.postgres = postgres
        self.names = names
        """The parameters' names in the order of their numbers; None: positional."""
        self.module = module
        """The module that declared it."""

    def args(self, params: Params) -> Sequence[object]:
        """``params`` as PostgreSQL's positional arguments."""
        if self.names is None:
            if isinstance(params, Mapping):
                raise TypeError(f"positional parameters expected: {self.sqlite!r}")
            return params
        if not isinstance(params, Mapping):
            raise TypeError(f"named parameters expected: {self.sqlite!r}")
        return [params[name] for name in self.names]

    def __repr__(self) -> str:
        return f"sql({self.sqlite!r})"


def sql(sqlite: str, *, postgres: str | None = None) -> Statement:
    """Declare a statement: its SQLite text, and its PostgreSQL text where it
    differs (written with the same parameters). At a module's top level."""
    text, names = _numbered(sqlite if postgres is None else postgres)
    sqlite_names = _numbered(sqlite)[1]
    if names != sqlite_names and (names is None or sqlite_names is None):
        raise ValueError(f"both texts must take the same kind of parameters: {sqlite!r}")
    if names is not None and sqlite_names is not None and set(names) != set(sqlite_names):
        raise ValueError(f"both texts must name the same parameters: {sqlite!r}")
    caller = inspect.currentframe()
    module = "" if caller is None or caller.f_back is None else caller.f_back.f_globals["__name__"]
    statement = Statement(sqlite.strip(), text, names, module)
    DECLARED.append(statement)
    return statement


def json_array(values: Iterable[object]) -> str:
    """A list of values as one parameter, a JSON array: read with ``IN
    (SELECT value FROM json_each(?))`` on SQLite and ``IN (SELECT value FROM
    json_array_elements_text(CAST(? AS json)))`` on PostgreSQL (declared with
    ``postgres=``), so a statement has one text whatever the list's length."""
    return msgspec.json.encode(list(values)).decode()


def _numbered(text: str) -> tuple[str, tuple[str, ...] | None]:
    """``text`` with its parameters as ``$n``, and the names in number order
    (None when they are positional)."""
    out: list[str] = []
    names: list[str] = []
    positional = numbered = 0
    at = 0
    for token in _TOKENS.finditer(text):
        value = token.group()
        if value[0] in "'\"" or value == "::":
            continue
        out.append(text[at : token.start()])
        at = token.end()
        if value == "?":
            positional += 1
            out.append(f"${positional}")
        elif value[0] == "?":
            numbered += 1
            out.append(f"${int(value[1:])}")
        else:
            name = value[1:]
            if name not in names:
                names.append(name)
            out.append(f"${names.index(name) + 1}")
    out.append(text[at:])
    if sum(map(bool, (positional, numbered, names))) > 1:
        raise ValueError(f"a statement takes one kind of parameters (?, ?N, :name): {text!r}")
    return "".join(out).strip(), (tuple(names) if names else None)
