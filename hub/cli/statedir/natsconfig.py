"""``mailrun nats-config``: the authorization an external NATS server needs.

Read from the hub's state dir, not from a running hub: with an external
server that refuses the hub until its operator installs this, the hub
cannot serve before the config exists. The hub's seed is created here if
the hub never ran, so the config can come first. Only public keys are
printed; the database is opened read-only.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from runtime import Subjects

from ..._errors import MigrationError, StoreUnavailable
from ...natsauth import hub_seed, producer_users_of, public_key, render_authorization, users_of
from ...store import (
    NatsUser,
    Tx,
    active_producer_users,
    live_deployment_users,
    read_state_file,
    schema_version,
)

HUB_DB = "hub.db"
_IDENTITIES_SINCE = 5  # the migration that added deployment.nats_user
_PRODUCERS_SINCE = 10  # the migration that added the producer table


@dataclass(frozen=True)
class NatsConfig:
    text: str  # the authorization block, NATS configuration syntax
    without_identity: list[str]  # live deployments from before identities


def nats_config(state_dir: Path, subject_prefix: str) -> NatsConfig:
    seed = hub_seed(state_dir)
    rows, producer_rows = _live_identities(state_dir / HUB_DB)
    users = users_of({"id": dep, "nats_user": user} for dep, user in rows)
    producers = producer_users_of({"id": prd, "nats_user": user} for prd, user in producer_rows)
    text = render_authorization(public_key(seed), users, Subjects(subject_prefix), producers)
    return NatsConfig(text, [dep for dep, user in rows if user is None])


Rows = list[NatsUser]


def _live_identities(path: Path) -> tuple[Rows, Rows]:
    """The live deployments' and the active producers' ``(id, nats_user)``."""
    if not path.exists():
        return [], []  # the hub never ran: it alone, for a start

    def read(tx: Tx) -> tuple[Rows, Rows]:
        version = schema_version(tx)
        if (version or 0) < _IDENTITIES_SINCE:
            raise MigrationError(
                f"{path} is at schema version {version}, from before NATS identities:"
                " run `mailrun migrate` (or start the hub) first"
            )
        rows = live_deployment_users(tx)
        producers = active_producer_users(tx) if (version or 0) >= _PRODUCERS_SINCE else []
        return rows, producers

    try:
        return read_state_file(path, read)
    except (sqlite3.Error, StoreUnavailable) as exc:
        raise MigrationError(f"cannot read {path}: {exc}") from exc
