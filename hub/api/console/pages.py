"""The web console's routes (docs/design.md section 8): deployments, their runs, a
run's dispatches and approvals, kept live.

Server-rendered HTML from Jinja2 templates (``rendering.py``: built by the
first page, not at the hub's start), with autoescaping on; and one
same-origin script (``console.js``, with ``console.css`` beside it): no
build step, and the Content-Security-Policy can forbid every inline
script and style. The script never builds markup from data. It follows
``GET /events`` and, on each change, fetches its own page again and swaps
in the new ``<main>``: the page has a single renderer, so a live update
shows exactly what a reload would.

The routes sit behind the gate like every other: a browser gets there
with the session cookie the login URL (``/?token=``) set, and the
approval buttons' POSTs pass its Origin check because they are same-origin
``fetch`` calls.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from functools import partial
from importlib.resources import files
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runtime import is_live

from ...store import (
    DeploymentView,
    get_deployment,
    get_run,
    list_approvals,
    list_deployments,
    list_dispatches,
    list_runs,
)
from ..context import RouteContext

if TYPE_CHECKING:
    from starlette.templating import Jinja2Templates

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
_LIMIT = 200  # rows of a list (runs, dispatches, approvals) a page shows

Live = Callable[[DeploymentView], DeploymentView]


def _events(deployment_id: str | None = None) -> str:
    if deployment_id is None:
        return "/events"
    return "/events?deployment=" + urllib.parse.quote(deployment_id, safe="")


def _load_templates() -> Jinja2Templates:
    # Imported by the first page, once for the process (rendering.py): a hub
    # nobody browses never loads jinja2.
    from .rendering import TEMPLATES

    return TEMPLATES


def console_routes(ctx: RouteContext, live: Live) -> list[Route]:
    store = ctx.store
    loaded: list[Jinja2Templates] = []

    async def page(request: Request, name: str, title: str, **context: Any) -> Response:
        if not loaded:
            # jinja2's import and the environment take some 30 ms: on a worker
            # thread, so the loop that carries mail does not stop for them.
            loaded.append(await anyio.to_thread.run_sync(_load_templates))
        context.update(title=title)
        return loaded[0].TemplateResponse(request, name, context, headers=PAGE_HEADERS)

    async def index(request: Request) -> Response:
        deployments = [live(d) for d in await store.read(list_deployments)]
        return await page(
            request, "index.html", "Deployments", events=_events(), deployments=deployments
        )

    async def deployment(request: Request) -> Response:
        d = live(await store.read(partial(get_deployment, key=str(request.path_params["key"]))))
        runs = await store.read(partial(list_runs, deployment=d.id, limit=_LIMIT))
        return await page(request, "deployment.html", d.name, events=_events(d.id), d=d, runs=runs)

    async def run(request: Request) -> Response:
        r = await store.read(partial(get_run, run_id=str(request.path_params["id"])))
        d = await store.read(partial(get_deployment, key=r.deployment_id))
        return await page(
            request,
            "run.html",
            f"Run {r.id}",
            events=_events(d.id),
            r=r,
            d=d,
            decidable=is_live(r.status),
            approvals=await store.read(partial(list_approvals, run=r.id, limit=_LIMIT)),
            dispatches=await store.read(partial(list_dispatches, run_id=r.id, limit=_LIMIT)),
        )

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
