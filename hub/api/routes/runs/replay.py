"""``POST /runs/{id}/replay``: a run's recorded items through new code, with
no effects, and the first item where the new code's steps, state or effects
differ from what the run recorded (docs/replay.md).

The body is ``{source | files, entrypoint?}``, checked like a deployment's
code. The entrypoint defaults to the run's own: a child run's recorded
entrypoint, else its deployment's. The store gives the history it still
holds (``read_history``); a scratch process (``scratch``) replays it.
"""

from __future__ import annotations

from functools import partial

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hub._errors import InvalidDeployment, NothingToReplay
from hub.store import build_sources, read_history

from ...context import RouteContext
from ...responses import json_response
from .scratch import replay_job, run_scratch

REPLAYS_AT_ONCE = 2
"""Scratch processes at once (each a Python process running user code);
more requests wait their turn."""


class ReplayIn(msgspec.Struct, kw_only=True):
    source: str | None = None
    files: dict[str, str] | None = None
    entrypoint: str | None = None  # None: the run's own


def replay_routes(ctx: RouteContext) -> list[Route]:
    turns = anyio.Semaphore(REPLAYS_AT_ONCE)

    async def replay(request: Request) -> Response:
        run_id = str(request.path_params["id"])
        spec = await ctx.read(request, ReplayIn, InvalidDeployment)
        history = await ctx.store.read(partial(read_history, run_id=run_id))
        sources = build_sources(spec.entrypoint or history.entrypoint, spec.source, spec.files)
        if not history.replayable:
            why = "; ".join(history.skipped) or "it has processed no item yet"
            raise NothingToReplay(f"run {run_id}: no item the store holds can be replayed: {why}")
        async with turns:
            report = await run_scratch(replay_job(history, sources), ctx.settings.environ)
        return json_response(report)

    return [Route("/runs/{id}/replay", replay, methods=["POST"])]
