"""TRANSITIONAL: the older code's SQL, written for SQLite, as PostgreSQL takes it.

The store's own statements are declared once per database (``hub.store.sql``)
and never pass here. What still does is code on the older API (bodies as
coroutines over ``runtime.Connection``, ``store.db``) outside ``hub/store``,
through ``_conn.py``; this module goes with that API. It turns the few
spellings that differ at the time a statement runs (each statement once,
then cached):

- parameters: ``?`` and ``?N`` (SQLite) -> ``$n`` (asyncpg), ``?N`` as
  ``$N``; ``:name`` -> ``$n``, one per name, the mapping's values in that
  order;
- ``INSERT OR IGNORE INTO ...`` -> ``INSERT INTO ... ON CONFLICT DO NOTHING``;
- an empty list, ``IN ()`` (SQLite takes it, PostgreSQL does not) -> ``IN
  (SELECT NULL WHERE FALSE)``: no row, so ``IN`` is false and ``NOT IN``
  true, as on SQLite;
- ``x IS ?`` / ``x IS NOT ?`` (SQLite's null-safe comparison) -> ``x IS
  NOT DISTINCT FROM ?`` / ``x IS DISTINCT FROM ?``;
- the scalar ``MIN(a, b)`` / ``MAX(a, b)`` (two or more arguments) ->
  ``LEAST`` / ``GREATEST``; the aggregates (one argument) stay;
- ``json_each(?)`` (a JSON array of ids) -> ``json_array_elements_text(?::json)``
  (both yield a column named ``value``);
- a few whole statements that have no shared spelling (the change feed's
  sequence): :data:`_STATEMENTS`.

Text inside quotes ('...' and "...") is kept as it is. Anything else is
left as it is: a statement using a SQLite-only function fails on
PostgreSQL at once, and the store's tests run on both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from runtime import Params

_STATEMENTS = {
    "SELECT seq FROM sqlite_sequence WHERE name = 'change'": (
        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM change_id_seq"
    ),
}
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\?\d*|:[A-Za-z_]\w*|::")
_INSERT_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", re.IGNORECASE)
_JSON_EACH = re.compile(r"\bjson_each\(\s*\?(\d*)\s*\)", re.IGNORECASE)
_EMPTY_IN = re.compile(r"\bIN\s*\(\s*\)", re.IGNORECASE)
_IS_NOT_PARAM = re.compile(r"\bIS\s+NOT\s+(?=\?)", re.IGNORECASE)
_IS_PARAM = re.compile(r"\bIS\s+(?=\?)", re.IGNORECASE)
_MIN_MAX = re.compile(r"\b(MIN|MAX)\s*\(", re.IGNORECASE)


@dataclass(frozen=True)
class Statement:
    """A statement in PostgreSQL's spelling, and how the caller's parameters
    (a sequence for ``?``/``?N``, a mapping for ``:name``) become its ``$n``
    arguments; ``returns_rows``: a query (or DML with RETURNING), not a
    command whose result is a count of rows."""

    text: str
    names: tuple[str, ...] | None = None  # :name: which key each $n is
    returns_rows: bool = True

    def args(self, params: Params) -> list[object]:
        if self.names is not None:
            assert isinstance(params, Mapping), self.text
            return [params[name] for name in self.names]
        return list(params.values() if isinstance(params, Mapping) else params)


_DML = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)
_QUERY = re.compile(r"^\s*(SELECT|WITH|VALUES|SHOW|TABLE)\b", re.IGNORECASE)


@lru_cache(maxsize=4096)
def translate(sql: str) -> Statement:
    """``sql`` in PostgreSQL's spelling (cached: each text is translated once)."""
    if (whole := _STATEMENTS.get(sql.strip())) is not None:
        return Statement(whole)
    text = _JSON_EACH.sub(r"json_array_elements_text(CAST(?\1 AS json))", sql)
    text = _EMPTY_IN.sub("IN (SELECT NULL WHERE FALSE)", text)
    text = _IS_NOT_PARAM.sub("IS DISTINCT FROM ", text)
    text = _IS_PARAM.sub("IS NOT DISTINCT FROM ", text)
    text = _scalar_min_max(text)
    ignore = _INSERT_OR_IGNORE.match(text) is not None
    if ignore:
        text = _INSERT_OR_IGNORE.sub("INSERT INTO", text, count=1)
    count = 0
    names: list[str] = []
    out: list[str] = []
    at = 0
    for token in _TOKENS.finditer(text):
        out.append(text[at : token.start()])
        at = token.end()
        value = token.group()
        if value[0] in "'\"" or value == "::":
            out.append(value)
        elif value[0] == ":":
            name = value[1:]
            if name not in names:
                names.append(name)
            out.append(f"${names.index(name) + 1}")
        elif value == "?":
            count += 1
            out.append(f"${count}")
        else:  # ?N, 1-based: $N, the same parameter
            out.append(f"${int(value[1:])}")
    out.append(text[at:])
    result = "".join(out).rstrip().rstrip(";")
    if ignore:
        result += " ON CONFLICT DO NOTHING"
    rows = bool(_QUERY.match(result)) or (
        bool(_DML.match(result)) and bool(_RETURNING.search(result))
    )
    return Statement(result, names=tuple(names) if names else None, returns_rows=rows)


def _scalar_min_max(sql: str) -> str:
    """``MIN(a, b)`` -> ``LEAST(a, b)`` (and MAX -> GREATEST); ``MIN(a)`` stays."""
    out, at = [], 0
    for match in _MIN_MAX.finditer(sql):
        depth, commas, i = 1, 0, match.end()
        while i < len(sql) and depth:
            char = sql[i]
            if char in "'\"":  # skip a quoted run
                i = sql.find(char, i + 1)
                if i < 0:
                    break
            elif char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
            elif char == "," and depth == 1:
                commas += 1
            i += 1
        if commas:
            name = "LEAST" if match.group(1).upper() == "MIN" else "GREATEST"
            out.append(sql[at : match.start()] + name + "(")
            at = match.end()
    out.append(sql[at:])
    return "".join(out)
