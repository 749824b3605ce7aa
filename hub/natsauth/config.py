"""The NATS server's authorization: one nkey user per identity, with permissions.

The hub's user may do everything. A deployment's user may publish only its
own request subjects (``<prefix>.hub.<request>.<dep>``, which tell the hub who
sent a frame) and answer the requests it received (``allow_responses``: the
hub's MailInbound and Ping on its inbound subject); it may subscribe only to
its inbound subject, the hub's announcements and its own reply inbox
(``_INBOX_<dep>.>``). With no ``no_auth_user``, a client without credentials
is refused. A producer's user may publish only on its own mail ingress
subject (``<prefix>.ingress.<producer>``) and subscribe only to its own reply
inbox (``_INBOX_<producer>.>``). The text is NATS configuration syntax; the embedded server reads
it from the state dir (``mailrun up``), an external one from wherever its
operator installs it (``mailrun nats-config``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from runtime import Subjects, is_id

log = logging.getLogger("mailrun.hub.natsauth")

_PUBLIC_USER = re.compile(r"^U[A-Z2-7]{55}$")


@dataclass(frozen=True, slots=True, order=True)
class DeploymentUser:
    deployment_id: str
    nats_user: str  # the public nkey


@dataclass(frozen=True, slots=True, order=True)
class ProducerUser:
    producer_id: str
    nats_user: str  # the public nkey


def is_public_user(value: object) -> bool:
    """A public nkey of a user (``U`` and 55 base32 characters)."""
    return isinstance(value, str) and _PUBLIC_USER.match(value) is not None


def deployment_permissions(subjects: Subjects, deployment_id: str) -> dict[str, Any]:
    """What a deployment's identity may do, as the server's config says it."""
    own = Subjects(subjects.prefix, deployment_id=deployment_id)
    return {
        "publish": {"allow": own.requests()},
        "subscribe": {
            "allow": [
                subjects.inbound(deployment_id),
                subjects.announce,
                f"{Subjects.inbox_prefix(deployment_id)}.>",
            ]
        },
        # One answer to each request received (the hub's, on its inbound
        # subject): its Acks and Pongs, and nothing else.
        "allow_responses": True,
    }


def producer_permissions(subjects: Subjects, producer_id: str) -> dict[str, Any]:
    """What a producer's identity may do: send mail batches on its own
    ingress subject and read the hub's answers in its own inbox. No
    ``allow_responses``: nobody sends it requests."""
    return {
        "publish": {"allow": [subjects.ingress(producer_id)]},
        "subscribe": {"allow": [f"{Subjects.inbox_prefix(producer_id)}.>"]},
    }


def users_of(listing: Iterable[Any]) -> set[DeploymentUser]:
    """The users of well-formed ``{id, nats_user}`` items (deployments of the
    hub's listing, rows of the store); anything else is skipped, so nothing
    but an id and a public key ever reaches the config."""
    users: set[DeploymentUser] = set()
    for item in listing:
        dep, user = item.get("id"), item.get("nats_user")
        if user is None:
            continue  # a deployment from before identities: no user (docs/security.md)
        if is_id(dep, "dep") and is_public_user(user):
            users.add(DeploymentUser(dep, user))
        else:
            log.warning("skipping a malformed NATS identity: %r", (dep, user))
    return users


def producer_users_of(listing: Iterable[Any]) -> set[ProducerUser]:
    """The users of well-formed ``{id, nats_user}`` producers (the hub's
    listing of active ones, rows of the store); anything else is skipped."""
    users: set[ProducerUser] = set()
    for item in listing:
        producer, user = item.get("id"), item.get("nats_user")
        if is_id(producer, "prd") and is_public_user(user):
            users.add(ProducerUser(producer, user))
        else:
            log.warning("skipping a malformed producer identity: %r", (producer, user))
    return users


def render_authorization(
    hub_user: str,
    users: Iterable[DeploymentUser],
    subjects: Subjects,
    producers: Iterable[ProducerUser] = (),
) -> str:
    """The ``authorization`` block admitting the hub, these deployments and
    these producers."""
    if not is_public_user(hub_user):
        raise ValueError(f"not a public nkey of a user: {hub_user!r}")
    lines = [
        "# mailrun's NATS identities: the hub, then one user per live deployment",
        "# and one per producer.",
        "# Generated from the hub's state (`mailrun nats-config`); reload the",
        "# server after installing it (nats-server --signal reload).",
        "authorization {",
        "  users = [",
        "    # the hub: every subject",
        f"    {{nkey: {json.dumps(hub_user)}}}",
    ]
    for user in sorted(users):
        permissions = json.dumps(deployment_permissions(subjects, user.deployment_id))
        lines.append(f"    # deployment {user.deployment_id}")
        lines.append(f"    {{nkey: {json.dumps(user.nats_user)}, permissions: {permissions}}}")
    for producer in sorted(producers):
        permissions = json.dumps(producer_permissions(subjects, producer.producer_id))
        lines.append(f"    # producer {producer.producer_id}")
        lines.append(f"    {{nkey: {json.dumps(producer.nats_user)}, permissions: {permissions}}}")
    lines += ["  ]", "}", ""]
    return "\n".join(lines)
