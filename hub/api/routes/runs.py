"""The routes that read what runs did: ``GET /runs``, ``GET /runs/{id}``,
``GET /dispatches/{id}`` and ``GET /outbox`` (mail runs sent out)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..._errors import InvalidRequest
from ...store import (
    OutboundStatus,
    get_dispatch,
    get_run,
    list_outbound,
    list_runs,
    resolve_deployment,
)
from ..context import RouteContext, query_limit
from ..responses import json_response


def run_routes(ctx: RouteContext) -> list[Route]:
    db = ctx.store.db

    async def runs(request: Request) -> Response:
        limit = query_limit(request)
        deployment = request.query_params.get("deployment") or None
        found = await list_runs(db, deployment=deployment, limit=limit)
        return json_response({"runs": found})

    async def one_run(request: Request) -> Response:
        return json_response(await get_run(db, str(request.path_params["id"])))

    async def one_dispatch(request: Request) -> Response:
        return json_response(await get_dispatch(db, str(request.path_params["id"])))

    async def outbox(request: Request) -> Response:
        limit = query_limit(request)
        status = request.query_params.get("status") or None
        if status is not None and status not in set(OutboundStatus):
            raise InvalidRequest(f"'status' must be one of {', '.join(OutboundStatus)}")
        deployment = request.query_params.get("deployment") or None
        dep_id = await resolve_deployment(db, deployment) if deployment else None
        found = await list_outbound(db, status=status, deployment_id=dep_id, limit=limit)
        return json_response({"outbox": found})

    return [
        Route("/runs", runs, methods=["GET"]),
        Route("/runs/{id}", one_run, methods=["GET"]),
        Route("/dispatches/{id}", one_dispatch, methods=["GET"]),
        Route("/outbox", outbox, methods=["GET"]),
    ]
