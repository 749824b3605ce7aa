"""The console's one Jinja2 environment (``templates/``, through Starlette's
``Jinja2Templates``), built when this module is first imported: by the first
page a console renders (on a worker thread, pages.py), not at the hub's
start. jinja2 and Starlette's templating cost every hub about 30 ms at
import, and most hubs never serve a page (docs/performance.md, "A
`mailrun` process's start"). The import system runs a module once,
whichever thread or app asks first, so one environment serves every
console of the process.

Autoescaping is on, so every value from the store is escaped once, on the
server, without asking.
"""

from __future__ import annotations

import time
import urllib.parse
from typing import Any

import jinja2
import msgspec
from starlette.templating import Jinja2Templates

from runtime.wire import anchor_is_live

_SHOWN = 200  # characters of a JSON value (state, result) a table cell shows


def _shown(value: Any) -> str:
    """A JSON value as a cell shows it: compact, cut at ``_SHOWN`` characters."""
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _when(at: float | None) -> str:
    return "" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def _path(key: str, prefix: str) -> str:
    return f"{prefix}/{urllib.parse.quote(key, safe='')}"


def _blank_none(value: object) -> object:
    """What a page shows of a value: nothing for a missing one, not "None"."""
    return "" if value is None else value


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__package__, "templates"),
        autoescape=True,  # every page is HTML: no value goes out unescaped
        undefined=jinja2.StrictUndefined,  # a misspelt name fails the page, not blanks it
        keep_trailing_newline=True,
        finalize=_blank_none,
    )
    env.filters.update(shown=_shown, when=_when, path=_path)
    env.tests.update(anchor_is_live=anchor_is_live)
    return Jinja2Templates(env=env)


TEMPLATES = _templates()

__all__ = ["TEMPLATES"]
