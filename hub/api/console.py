"""The web console (DESIGN section 8): deployments, their runs, a run's
dispatches and approvals, kept live.

Server-rendered HTML and one same-origin script (``console.js``, with
``console.css`` beside it): no build step, and the Content-Security-Policy
can forbid every inline script and style. Every value from the store is
escaped here, once, on the server; the script never builds markup from
data. It follows ``GET /events`` and, on each change, fetches its own page
again and swaps in the new ``<main>``: the page has a single renderer, so
a live update shows exactly what a reload would.

The routes sit behind ``AdminAuth`` like every other: a browser gets there
with the session cookie the login URL (``/?token=``) set, and the
approval buttons' POSTs pass its Origin check because they are same-origin
``fetch`` calls.
"""

from __future__ import annotations

import html
import time
import urllib.parse
from collections.abc import Callable, Iterable
from functools import partial
from importlib.resources import files
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from runtime import anchor_is_live, is_live

from ..store import (
    DeploymentView,
    get_deployment,
    get_run,
    list_approvals,
    list_deployments,
    list_dispatches,
    list_runs,
)
from .context import RouteContext

# 'self' only: the script and the stylesheet are routes of this hub, and the
# script's fetches and its EventSource go back to it. No inline code at all.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self';"
    " connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none';"
    " frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_STATIC = {
    name: (files(__package__).joinpath(name).read_bytes(), media)
    for name, media in (
        ("console.js", "text/javascript; charset=utf-8"),
        ("console.css", "text/css; charset=utf-8"),
    )
}
_STATIC_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
_SHOWN = 200  # characters of a JSON value (state, result) a table cell shows
_LIMIT = 200  # rows of a list (runs, dispatches, approvals) a page shows

_DEPLOYMENT_HEADS = ["name", "address", "health", "pending", "stuck", "quarantined", "version"]
_RUN_HEADS = ["run", "status", "parent", "state", "result", "error", "updated"]
_DISPATCH_HEADS = ["seq", "kind", "subject", "from", "status", "attempts", "version", "created"]

Live = Callable[[DeploymentView], DeploymentView]


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _json(value: Any) -> str:
    text = msgspec.json.encode(value).decode()
    return esc(text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…")


def _when(at: float | None) -> str:
    if at is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def _link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def _path(prefix: str, key: str) -> str:
    return f"{prefix}/{urllib.parse.quote(key, safe='')}"


def _table(cls: str, heads: Iterable[str], rows: list[list[str]], empty: str) -> str:
    """A table of cells already escaped (or links built from escaped text)."""
    if not rows:
        return f'<p class="empty {cls}">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    table = f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
    return f'<div class="scroll"><table class="{cls}">{table}</table></div>'


def _page(title: str, crumbs: list[str], events: str, body: str) -> Response:
    nav = " / ".join([_link("/", "deployments"), *crumbs])
    text = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)} · mailrun</title>
<link rel="stylesheet" href="/console.css">
<script src="/console.js" defer></script></head>
<body data-events="{esc(events)}">
<header><nav>{nav}</nav><span id="live" class="off">connecting</span></header>
<p id="notice" role="status" hidden></p>
<main><h1>{esc(title)}</h1>
{body}</main></body></html>
"""
    return HTMLResponse(text, headers=PAGE_HEADERS)


def _health(d: DeploymentView) -> str:
    if not anchor_is_live(d.status):
        return esc(d.status)
    return "connected" if d.connected else '<span class="bad">not connected</span>'


def console_routes(ctx: RouteContext, live: Live) -> list[Route]:
    store = ctx.store

    async def index(request: Request) -> Response:
        rows = [
            [_link(_path("/console/deployments", d.id), d.name), esc(d.address), _health(d),
             esc(d.pending_dispatches), esc(d.stuck), esc(d.quarantined), esc(d.version)]
            for d in map(live, await store.read(list_deployments))
        ]  # fmt: skip
        table = _table("deployments", _DEPLOYMENT_HEADS, rows, "No deployments yet.")
        return _page("Deployments", [], "/events", table)

    async def deployment(request: Request) -> Response:
        d = live(await store.read(partial(get_deployment, key=str(request.path_params["key"]))))
        rows = [
            [_link(_path("/console/runs", r.id), r.id), esc(r.status),
             "top level" if r.is_top_level else esc(r.parent_run_id), _json(r.state),
             _json(r.result), esc(r.error), esc(_when(r.updated_at))]
            for r in await store.read(partial(list_runs, deployment=d.id, limit=_LIMIT))
        ]  # fmt: skip
        summary = (
            f'<dl class="summary"><dt>address</dt><dd>{esc(d.address)}</dd>'
            f"<dt>health</dt><dd>{_health(d)}</dd><dt>pending</dt>"
            f"<dd>{esc(d.pending_dispatches)}</dd><dt>version</dt><dd>{esc(d.version)}</dd></dl>"
        )
        runs = _table("runs", _RUN_HEADS, rows, "No runs yet.")
        events = "/events?deployment=" + urllib.parse.quote(d.id, safe="")
        return _page(d.name, [], events, f"{summary}<h2>Runs</h2>{runs}")

    async def run(request: Request) -> Response:
        r = await store.read(partial(get_run, run_id=str(request.path_params["id"])))
        d = await store.read(partial(get_deployment, key=r.deployment_id))
        approvals = [
            [esc(a.id), esc(a.prompt), esc(a.decision or a.status),
             _buttons(a.id) if a.status == "pending" and is_live(r.status) else ""]
            for a in await store.read(partial(list_approvals, run=r.id, limit=_LIMIT))
        ]  # fmt: skip
        dispatches = [
            [esc(x.seq), esc(x.kind), esc(x.subject), esc(x.sender), esc(x.status),
             esc(x.attempts), esc(x.version), esc(_when(x.created_at))]
            for x in await store.read(partial(list_dispatches, run_id=r.id, limit=_LIMIT))
        ]  # fmt: skip
        summary = (
            f'<dl class="summary"><dt>status</dt><dd class="status">{esc(r.status)}</dd>'
            f"<dt>state</dt><dd><code>{_json(r.state)}</code></dd>"
            f"<dt>result</dt><dd><code>{_json(r.result)}</code></dd>"
            f"<dt>error</dt><dd>{esc(r.error)}</dd></dl>"
        )
        body = (
            f"{summary}<h2>Approvals</h2>"
            + _table("approvals", ["approval", "prompt", "status", ""], approvals, "None asked.")
            + "<h2>Dispatches</h2>"
            + _table("dispatches", _DISPATCH_HEADS, dispatches, "None yet.")
        )
        crumbs = [_link(_path("/console/deployments", d.id), d.name)]
        events = "/events?deployment=" + urllib.parse.quote(d.id, safe="")
        return _page(f"Run {r.id}", crumbs, events, body)

    async def static(request: Request) -> Response:
        content, media = _STATIC[request.url.path.lstrip("/")]
        return Response(content, media_type=media, headers=_STATIC_HEADERS)

    async def no_icon(request: Request) -> Response:
        # Browsers ask for it on their own; a 404 would be an error in their console.
        return Response(status_code=204, headers=_STATIC_HEADERS)

    return [
        Route("/", index, methods=["GET"]),
        Route("/favicon.ico", no_icon, methods=["GET"]),
        Route("/console/deployments/{key}", deployment, methods=["GET"]),
        Route("/console/runs/{id}", run, methods=["GET"]),
        *(Route(f"/{name}", static, methods=["GET"]) for name in _STATIC),
    ]


def _buttons(approval_id: str) -> str:
    return "".join(
        f'<button type="button" data-approval="{esc(approval_id)}" data-decision="{d}">'
        f"{label}</button>"
        for d, label in (("approve", "Approve"), ("reject", "Reject"))
    )
