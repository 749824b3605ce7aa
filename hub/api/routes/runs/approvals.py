"""Approvals: listing them, reading one, and deciding one.

A decision is a trigger of kind ``approval`` to the approval's run, through
the one accept function, which marks the approval decided in the
transaction that stores the decision's dispatch. So a decision the run can
no longer take (it ended: ``workflow_run_terminal``) leaves the approval
pending, and nothing decides an approval without the run being told. The
hub decides an approval asked with a timeout ``timeout`` the same way when
it expires (``hub.clock.timers``).
"""

from __future__ import annotations

from functools import partial

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hub._errors import InvalidRequest
from hub.store import decision_trigger, get_approval, list_approvals

from ...context import RouteContext, query_limit
from ...requests import DECISIONS, ApprovalIn
from ...responses import json_response


def approval_routes(ctx: RouteContext) -> list[Route]:
    async def approvals(request: Request) -> Response:
        params = request.query_params
        found = await ctx.store.read(
            partial(
                list_approvals,
                run=params.get("run") or None,
                deployment=params.get("deployment") or None,
                status=params.get("status") or None,
                limit=query_limit(request),
            )
        )
        return json_response({"approvals": found})

    async def one_approval(request: Request) -> Response:
        return json_response(
            await ctx.store.read(partial(get_approval, approval_id=str(request.path_params["id"])))
        )

    async def decide(request: Request) -> Response:
        approval_id = str(request.path_params["id"])
        decision = (await ctx.read(request, ApprovalIn, InvalidRequest, 64 * 1024)).decision
        if decision not in DECISIONS:
            raise InvalidRequest(f"'decision' must be 'approve' or 'reject', not {decision[:50]!r}")
        return await ctx.accept(decision_trigger(approval_id, decision))

    return [
        Route("/approvals", approvals, methods=["GET"]),
        Route("/approvals/{id}", one_approval, methods=["GET"]),
        Route("/approvals/{id}", decide, methods=["POST"]),
    ]
