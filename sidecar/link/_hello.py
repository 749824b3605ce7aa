"""Who the sidecar is to the hub, and how it proves it: its :class:`Identity`,
the hello exchange (Hello, Challenge, the signed Hello, Welcome), and the
:class:`Session` a Welcome makes.

A Refused{owner_conflict} to a hello (another process owns the deployment)
or {deployment_not_live | unknown_deployment} (it was deleted) is final:
:class:`FencedOut` (the link's ``run`` raises it and the process stops);
any other refusal is one more failed hello.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from runtime import (
    Challenge,
    FrameDecoder,
    Hello,
    Reason,
    Refused,
    Welcome,
    hello_message,
)
from runtime.wire import sign

from .._errors import DeploymentGone, HubRefused, OwnerConflict

_GONE_REASONS = frozenset({Reason.DEPLOYMENT_NOT_LIVE, Reason.UNKNOWN_DEPLOYMENT})

Ask = Callable[[str, Any, FrameDecoder[Any], float], Awaitable[Any]]
"""``ask(subject, frame, decoder, timeout)``: one request to the hub, its decoded reply."""


@dataclass(frozen=True, slots=True)
class Session:
    session_id: str
    owner_epoch: int
    hub_boot_id: str


@dataclass(frozen=True, slots=True)
class Identity:
    deployment_id: str
    instance_id: str
    seed: str
    public_key: str
    home: str = ""
    previous_instance: str = ""


async def say_hello(
    ask: Ask, subject: str, ident: Identity, *, takeover: bool, timeout: float
) -> Welcome:
    """The hub's Welcome to ``ident`` (answering its Challenge); raises
    :class:`FencedOut` or :class:`HubRefused` when it refuses."""
    hello = Hello(
        deployment_id=ident.deployment_id,
        instance_id=ident.instance_id,
        public_key=ident.public_key,
        takeover=takeover,
        home=ident.home,
        previous_instance=ident.previous_instance,
    )
    decoder: FrameDecoder[Challenge | Welcome | Refused] = FrameDecoder(
        Challenge | Welcome | Refused
    )
    reply = await ask(subject, hello, decoder, timeout)
    if isinstance(reply, Challenge):
        message = hello_message(reply.nonce, ident.deployment_id, ident.instance_id)
        signed = msgspec.structs.replace(
            hello, nonce=reply.nonce, signature=sign(ident.seed, message)
        )
        reply = await ask(subject, signed, decoder, timeout)
    if isinstance(reply, Welcome):
        return reply
    if isinstance(reply, Refused):
        if reply.reason == Reason.OWNER_CONFLICT:
            raise OwnerConflict(reply.reason, reply.detail)
        if reply.reason in _GONE_REASONS:
            raise DeploymentGone(reply.reason, reply.detail)
        raise HubRefused(reply.reason, reply.detail)
    raise HubRefused("unexpected_reply", type(reply).__name__)
