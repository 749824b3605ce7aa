"""Workflow versions: adding one to a live deployment, listing them, and
activating an earlier one (a rollback).

Both changes are rollouts (``hub.wire.delivery.rollout``): the request is committed,
the deployment's sidecar loads the version, and only then does it become
active. The route waits for that outcome for up to ``?wait=`` seconds
(default 30): 201 (added) or 200 (activated) once active, 422
``version_refused`` with the sidecar's reason, or 202 with status
``loading`` when the sidecar has not answered yet (the rollout goes on: it
is a row, so it survives restarts of hub and sidecar).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hub._errors import InvalidDeployment, InvalidRequest, VersionRefused
from hub.store import (
    VersionStatus,
    VersionView,
    active_entrypoint,
    add_version,
    build_sources,
    get_version,
    list_versions,
    request_rollout,
    resolve_deployment,
)

from ...context import RouteContext
from ...requests import VersionIn, is_number
from ...responses import json_response

DEFAULT_WAIT = 30.0
_POLL = 0.05


def version_routes(ctx: RouteContext, on_rollout: Callable[[str], object]) -> list[Route]:
    store = ctx.store

    async def versions(request: Request) -> Response:
        dep_id = await store.read(partial(resolve_deployment, key=str(request.path_params["key"])))
        return json_response(
            {"versions": await store.read(partial(list_versions, deployment_id=dep_id))}
        )

    async def add(request: Request) -> Response:
        dep_id = await store.read(partial(resolve_deployment, key=str(request.path_params["key"])))
        wait = _wait(request)
        spec = await ctx.read(request, VersionIn, InvalidDeployment)
        entrypoint = spec.entrypoint
        if not entrypoint:
            entrypoint = await store.read(partial(active_entrypoint, deployment_id=dep_id))
        sources = build_sources(entrypoint, spec.source, spec.files)
        version = await ctx.store.transact(
            partial(add_version, deployment_id=dep_id, sources=sources),
            heavy=True,  # the sources may be megabytes
        )
        on_rollout(dep_id)
        return await _outcome(dep_id, version, wait, 201)

    async def activate(request: Request) -> Response:
        dep_id = await store.read(partial(resolve_deployment, key=str(request.path_params["key"])))
        text = str(request.path_params["n"])
        if not is_number(text):
            raise InvalidRequest(f"version {text[:20]!r} is not a number")
        wait = _wait(request)
        asked = await ctx.store.transact(
            partial(request_rollout, deployment_id=dep_id, version=int(text))
        )
        if asked:
            on_rollout(dep_id)
        return await _outcome(dep_id, int(text), wait, 200)

    async def _outcome(dep_id: str, version: int, wait: float, done: int) -> Response:
        view = await _settled(dep_id, version, wait)
        if view.status == VersionStatus.REFUSED:
            raise VersionRefused(f"version {version} of {dep_id}: {view.error}")
        return json_response(view, done if view.active else 202)

    async def _settled(dep_id: str, version: int, wait: float) -> VersionView:
        """The version once its rollout settled, or as it is after ``wait`` s."""
        view = await store.read(partial(get_version, deployment_id=dep_id, version=version))
        with anyio.move_on_after(wait):
            while view.status == VersionStatus.LOADING:
                await anyio.sleep(_POLL)
                view = await store.read(partial(get_version, deployment_id=dep_id, version=version))
        return view

    return [
        Route("/workflows/deployments/{key}/versions", versions, methods=["GET"]),
        Route("/workflows/deployments/{key}/versions", add, methods=["POST"]),
        Route("/workflows/deployments/{key}/versions/{n}/activate", activate, methods=["POST"]),
    ]


def _wait(request: Request) -> float:
    text = request.query_params.get("wait", str(int(DEFAULT_WAIT)))
    if not is_number(text) or not 0 <= int(text) <= 300:
        raise InvalidRequest("'wait' must be a number of seconds from 0 to 300")
    return float(text)
