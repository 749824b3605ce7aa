"""The routes of a deployment's schedules:
``POST|GET /workflows/deployments/{id or name}/schedules`` and
``DELETE /workflows/deployments/{id or name}/schedules/{id}``.

A schedule is ``{"every": seconds}`` or ``{"cron": EXPR, "tz": ZONE}``,
with an optional ``subject`` and ``payload`` (any JSON value) that each of
its ``schedule`` items carries. Everything is checked before anything is
written (``runtime.schedules.ScheduleSpec.check``, then the subject and the
payload's size): a refusal is 422 ``invalid_schedule`` with the reason, and
nothing is stored. Once a schedule is added or removed the schedule loop is
woken (``on_change``), so a new first due time is waited for from now.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hub._errors import BadSchedule
from hub.intake import single_line
from hub.store import add_schedule, list_schedules, remove_schedule, resolve_deployment
from runtime.schedules import InvalidSchedule, ScheduleSpec
from runtime.wire import MAX_TIMER_PAYLOAD

from ...context import RouteContext
from ...responses import json_response

MAX_SUBJECT = 998
"""Characters: a mail header line's limit (RFC 5322), as a subject may end up in one."""
MAX_PAYLOAD = MAX_TIMER_PAYLOAD.bytes
"""Bytes of a schedule's payload, encoded as JSON: a timer's limit."""
_REQUEST_LIMIT = MAX_PAYLOAD + 16 * 1024


class ScheduleIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``POST .../schedules``; a misspelt field is refused, not ignored."""

    every: float | None = None
    cron: str | None = None
    tz: str | None = None  # None: UTC, the only zone an every schedule takes
    subject: str = ""
    payload: Any = None

    def spec(self) -> ScheduleSpec:
        """The schedule it asks for, checked (``BadSchedule`` with the reason)."""
        tz = "UTC" if self.tz is None else self.tz
        spec = ScheduleSpec(every=self.every, cron=self.cron, tz=tz)
        try:
            spec.check()
            spec.first_due(time.time())  # a cron expression with no time left to match
        except InvalidSchedule as exc:
            raise BadSchedule(str(exc)) from None
        if len(self.subject) > MAX_SUBJECT or not single_line(self.subject):
            raise BadSchedule(f"'subject' must be at most {MAX_SUBJECT} characters on one line")
        return spec

    def encoded_payload(self) -> bytes | None:
        if self.payload is None:
            return None
        encoded = msgspec.json.encode(self.payload)
        if len(encoded) > MAX_PAYLOAD:
            raise BadSchedule(
                f"'payload' is {len(encoded)} bytes as JSON: at most {MAX_PAYLOAD} are kept"
            )
        return encoded


def schedule_routes(ctx: RouteContext, on_change: Callable[[], object] | None) -> list[Route]:
    """``on_change()`` wakes the schedule loop once a change is committed."""
    store = ctx.store

    def changed() -> None:
        if on_change is not None:
            on_change()

    async def deployment_of(request: Request) -> str:
        key = str(request.path_params["key"])
        return await store.read(partial(resolve_deployment, key=key))

    async def post_schedule(request: Request) -> Response:
        dep_id = await deployment_of(request)
        spec_in = await ctx.read(request, ScheduleIn, BadSchedule, _REQUEST_LIMIT)
        spec = spec_in.spec()
        adding = partial(
            add_schedule,
            deployment_id=dep_id,
            spec=spec,
            subject=spec_in.subject,
            payload=spec_in.encoded_payload(),
            now=time.time(),
        )
        added = await store.transact(adding)
        changed()
        return json_response(added, 201)

    async def get_schedules(request: Request) -> Response:
        dep_id = await deployment_of(request)
        found = await store.read(partial(list_schedules, deployment_id=dep_id))
        return json_response({"schedules": found})

    async def delete_schedule(request: Request) -> Response:
        dep_id = await deployment_of(request)
        removing = partial(
            remove_schedule, deployment_id=dep_id, schedule_id=str(request.path_params["sid"])
        )
        removed = await store.transact(removing)
        changed()
        return json_response(removed)

    return [
        Route("/workflows/deployments/{key}/schedules", post_schedule, methods=["POST"]),
        Route("/workflows/deployments/{key}/schedules", get_schedules, methods=["GET"]),
        Route("/workflows/deployments/{key}/schedules/{sid}", delete_schedule, methods=["DELETE"]),
    ]
