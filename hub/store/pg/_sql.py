"""The store's SQL, written for SQLite, as PostgreSQL takes it.

Store code is written once, in the SQL both databases share; this module
turns the few spellings that differ at the time a statement runs (each
statement once, then cached):

- parameters: ``?`` and ``?N`` (SQLite) -> ``%s`` (psycopg), the
  parameters reordered for ``?N``; ``:name`` -> ``%(name)s``; a literal
  ``%`` -> ``%%``;
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

Text inside quotes ('...' and "...") is kept as it is, but for ``%``, which
psycopg reads everywhere. Anything else is
left as it is: a statement using a SQLite-only function fails on
PostgreSQL at once, and the store's tests run on both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache

from runtime import Params

Reorder = Callable[[Params], Params]

_STATEMENTS = {
    "SELECT seq FROM sqlite_sequence WHERE name = 'change'": (
        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM change_id_seq"
    ),
}
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\?\d*|:[A-Za-z_]\w*|%|::")
_INSERT_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", re.IGNORECASE)
_JSON_EACH = re.compile(r"\bjson_each\(\s*\?(\d*)\s*\)", re.IGNORECASE)
_EMPTY_IN = re.compile(r"\bIN\s*\(\s*\)", re.IGNORECASE)
_IS_NOT_PARAM = re.compile(r"\bIS\s+NOT\s+(?=\?)", re.IGNORECASE)
_IS_PARAM = re.compile(r"\bIS\s+(?=\?)", re.IGNORECASE)
_MIN_MAX = re.compile(r"\b(MIN|MAX)\s*\(", re.IGNORECASE)


def _same(params: Params) -> Params:
    return params


@lru_cache(maxsize=4096)
def translate(sql: str) -> tuple[str, Reorder]:
    """``sql`` in PostgreSQL's spelling, and what turns its parameters into
    psycopg's (a function of the parameters as the caller passes them)."""
    if (whole := _STATEMENTS.get(sql.strip())) is not None:
        return whole, _same
    text = _JSON_EACH.sub(r"json_array_elements_text(CAST(?\1 AS json))", sql)
    text = _EMPTY_IN.sub("IN (SELECT NULL WHERE FALSE)", text)
    text = _IS_NOT_PARAM.sub("IS DISTINCT FROM ", text)
    text = _IS_PARAM.sub("IS NOT DISTINCT FROM ", text)
    text = _scalar_min_max(text)
    ignore = _INSERT_OR_IGNORE.match(text) is not None
    if ignore:
        text = _INSERT_OR_IGNORE.sub("INSERT INTO", text, count=1)
    order: list[int] = []
    numbered = False
    out: list[str] = []
    at = 0
    for token in _TOKENS.finditer(text):
        out.append(text[at : token.start()])
        at = token.end()
        value = token.group()
        if value[0] in "'\"":
            out.append(value.replace("%", "%%"))  # psycopg reads % even inside quotes
        elif value == "::":
            out.append(value)
        elif value == "%":
            out.append("%%")
        elif value[0] == ":":
            out.append(f"%({value[1:]})s")
        elif value == "?":
            order.append(len(order))
            out.append("%s")
        else:  # ?N, 1-based
            numbered = True
            order.append(int(value[1:]) - 1)
            out.append("%s")
    out.append(text[at:])
    result = "".join(out).rstrip().rstrip(";")
    if ignore:
        result += " ON CONFLICT DO NOTHING"
    if not numbered:
        return result, _same
    picks = tuple(order)
    return result, lambda params: _pick(params, picks)


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


def _pick(params: Params, picks: Sequence[int]) -> Params:
    if isinstance(params, Mapping):
        return params
    values = list(params)
    return [values[i] for i in picks]


def translate_many(sql: str, rows: Iterable[Params]) -> tuple[str, list[Params]]:
    """:func:`translate` for ``executemany``."""
    text, reorder = translate(sql)
    return text, [reorder(row) for row in rows]
