"""The routes that read what runs did: ``GET /runs``, ``GET /runs/{id}``,
``GET /dispatches/{id}`` and ``GET /outbox`` (mail runs sent out)."""

from __future__ import annotations

from functools import partial

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hub._errors import InvalidRequest
from hub.store import (
    OutboundStatus,
    get_dispatch,
    get_run,
    list_outbound,
    list_runs,
    resolve_deployment,
)

from ...context import RouteContext, query_limit
from ...responses import json_response


def run_routes(ctx: RouteContext) -> list[Route]:
    store = ctx.store

    async def runs(request: Request) -> Response:
        limit = query_limit(request)
        deployment = request.query_params.get("deployment") or None
        found = await store.read(partial(list_runs, deployment=deployment, limit=limit))
        return json_response({"runs": found})

    async def one_run(request: Request) -> Response:
        return json_response(
            await store.read(partial(get_run, run_id=str(request.path_params["id"])))
        )

    async def one_dispatch(request: Request) -> Response:
        return json_response(
            await store.read(partial(get_dispatch, dispatch_id=str(request.path_params["id"])))
        )

    async def outbox(request: Request) -> Response:
        limit = query_limit(request)
        status = request.query_params.get("status") or None
        if status is not None and status not in set(OutboundStatus):
            raise InvalidRequest(f"'status' must be one of {', '.join(OutboundStatus)}")
        deployment = request.query_params.get("deployment") or None
        dep_id = (
            await store.read(partial(resolve_deployment, key=deployment)) if deployment else None
        )
        found = await store.read(
            partial(list_outbound, status=status, deployment_id=dep_id, limit=limit)
        )
        return json_response({"outbox": found})

    return [
        Route("/runs", runs, methods=["GET"]),
        Route("/runs/{id}", one_run, methods=["GET"]),
        Route("/dispatches/{id}", one_dispatch, methods=["GET"]),
        Route("/outbox", outbox, methods=["GET"]),
    ]
