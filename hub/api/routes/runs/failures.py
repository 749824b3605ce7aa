"""The routes of failing handlers and of runs stopped from outside:
``POST /runs/{id}/resume`` (a suspended run tries again),
``GET /dispatches?status=parked`` (the items set aside),
``POST /dispatches/{id}/retry`` (one of them sent again) and
``POST /runs/{id}/cancel`` (a run cancelled, or terminated).

Each change is one store transaction (``resume_run``, ``retry_dispatch``,
``cancel_run``); once it is committed the dispatcher is woken for the
deployment, as after an accept, so the ``resume`` or ``cancel`` item or the
retried dispatch goes out at once.
"""

from __future__ import annotations

import inspect
from functools import partial

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hub._errors import InvalidRequest
from hub.intake import single_line
from hub.store import (
    DispatchStatus,
    cancel_run,
    get_dispatch,
    get_run,
    list_parked,
    resolve_deployment,
    resume_run,
    retry_dispatch,
)

from ...context import RouteContext, query_limit
from ...requests import CancelIn, decode_json, read_body
from ...responses import json_response

MAX_REASON = 1000
"""Characters of a cancel's reason at most."""


def failure_routes(ctx: RouteContext) -> list[Route]:
    store = ctx.store

    async def wake(deployment_id: str) -> None:
        woken = ctx.acceptor.on_accepted
        if woken is not None:
            result = woken({deployment_id})
            if inspect.isawaitable(result):
                await result

    async def resume(request: Request) -> Response:
        run_id = str(request.path_params["id"])
        await store.transact(partial(resume_run, run_id=run_id))
        run = await store.read(partial(get_run, run_id=run_id))
        await wake(run.deployment_id)
        return json_response(run)

    async def cancel(request: Request) -> Response:
        run_id = str(request.path_params["id"])
        raw = await read_body(
            request.stream(),
            request.headers.get("content-length"),
            limit=64 * 1024,
            timeout=ctx.settings.body_timeout,
        )
        spec = decode_json(raw, CancelIn, InvalidRequest) if raw.strip() else CancelIn()
        if not (0 < len(spec.reason) <= MAX_REASON and single_line(spec.reason)):
            raise InvalidRequest(f"'reason' must be 1 to {MAX_REASON} characters on one line")
        cancelling = partial(
            cancel_run, run_id=run_id, reason=spec.reason, terminate=spec.terminate
        )
        receipt = await store.transact(cancelling)
        await wake(receipt.deployment_id)
        return json_response(receipt, 202)

    async def dispatches(request: Request) -> Response:
        limit = query_limit(request)
        status = request.query_params.get("status") or DispatchStatus.PARKED
        if status != DispatchStatus.PARKED:
            raise InvalidRequest("'status' must be 'parked' (the one listing there is)")
        deployment = request.query_params.get("deployment") or None
        dep_id = (
            await store.read(partial(resolve_deployment, key=deployment)) if deployment else None
        )
        found = await store.read(partial(list_parked, deployment_id=dep_id, limit=limit))
        return json_response({"dispatches": found})

    async def retry(request: Request) -> Response:
        dispatch_id = str(request.path_params["id"])
        retried = await store.transact(partial(retry_dispatch, dispatch_id=dispatch_id))
        await wake(retried.deployment_id)
        return json_response(await store.read(partial(get_dispatch, dispatch_id=dispatch_id)), 202)

    return [
        Route("/runs/{id}/resume", resume, methods=["POST"]),
        Route("/runs/{id}/cancel", cancel, methods=["POST"]),
        Route("/dispatches", dispatches, methods=["GET"]),
        Route("/dispatches/{id}/retry", retry, methods=["POST"]),
    ]
