"""The routes that manage producers, the identities of the NATS mail ingress
(``mailrun producer add|list|remove``).

``POST /producers {name}`` -> 201 the producer with the ``seed`` of its NATS
identity: the one time the seed is shown (the hub keeps only the public
key). ``GET /producers[?status=active|removed]``, ``GET /producers/{id or
name}``, ``DELETE /producers/{id or name}`` (idempotent): from then on the
hub refuses the producer's batches, and ``mailrun up`` drops its user from
the embedded server's configuration at its next poll (an external server's
operator installs ``mailrun nats-config`` again).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from runtime import Subjects

from ..._errors import InvalidRequest
from ...store import (
    ProducerStatus,
    ProducerView,
    get_producer,
    insert_producer,
    list_producers,
    remove_producer,
    resolve_producer,
)
from ..context import RouteContext
from ..responses import json_response


class ProducerIn(msgspec.Struct, kw_only=True):
    name: str


def producer_json(view: ProducerView, subjects: Subjects) -> dict[str, Any]:
    """A producer as the API shows it: its row, and where it speaks and listens."""
    shown: dict[str, Any] = msgspec.to_builtins(view)
    shown["subject"] = subjects.ingress(view.id)
    shown["inbox_prefix"] = Subjects.inbox_prefix(view.id)
    return shown


def producer_routes(ctx: RouteContext) -> list[Route]:
    subjects = Subjects(ctx.settings.subject_prefix)

    async def post_producer(request: Request) -> Response:
        spec = await ctx.read(request, ProducerIn, InvalidRequest)
        new = await ctx.store.transact(partial(insert_producer, name=spec.name))
        return json_response({**producer_json(new.producer, subjects), "seed": new.seed}, 201)

    async def get_producers(request: Request) -> Response:
        status = request.query_params.get("status") or None
        if status is not None and status not in set(ProducerStatus):
            raise InvalidRequest(f"'status' must be one of {', '.join(ProducerStatus)}")
        found = await ctx.store.read(partial(list_producers, status=status))
        return json_response({"producers": [producer_json(p, subjects) for p in found]})

    async def one_producer(request: Request) -> Response:
        key = str(request.path_params["key"])
        if request.method == "DELETE":
            producer_id = await ctx.store.read(partial(resolve_producer, key=key))
            await ctx.store.transact(partial(remove_producer, producer_id=producer_id))
            key = producer_id
        return json_response(
            producer_json(await ctx.store.read(partial(get_producer, key=key)), subjects)
        )

    return [
        Route("/producers", post_producer, methods=["POST"]),
        Route("/producers", get_producers, methods=["GET"]),
        Route("/producers/{key}", one_producer, methods=["GET", "DELETE"]),
    ]
