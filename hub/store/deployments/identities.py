"""NATS identities for deployments created before they existed.

A deployment created by this release gets its nkey user at creation
(``create_deployment``). An older one has none (``nats_user`` NULL) and its
restore record no seed, so on a server that refuses anonymous clients its
sidecar could not connect. The hub can hand such a deployment an identity
only where it can hand over the seed: the restore record it wrote for the
local sidecar (``--sidecar-root``, as under ``mailrun up``). A deployment
whose sidecar runs elsewhere keeps none (docs/security.md).
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import anyio
import msgspec

from runtime import MailrunError, read_restore_record, record_path, write_restore_record

from ..._errors import NatsIdentityError
from ...natsauth import new_user_key, public_key
from ..base import Store
from ..sql import Tx, sql

log = logging.getLogger("mailrun.hub.identities")

_MISSING = sql(
    "SELECT id FROM deployment WHERE deleted_at IS NULL AND nats_user IS NULL ORDER BY id"
)
_GIVE = sql("UPDATE deployment SET nats_user = ? WHERE id = ? AND nats_user IS NULL")


async def give_nats_identities(store: Store, sidecar_root: Path) -> int:
    """Give every live deployment without a NATS identity whose restore record
    is under ``sidecar_root`` one; return how many got one.

    The seed is written into the record before the row names its public key,
    and a seed already in the record is taken as it is, so a crash in between
    leaves nothing that a later boot does not finish."""
    missing = [row[0] for row in await store.read(lambda tx: tx.fetch_all(_MISSING))]
    given = 0
    for dep in missing:
        path = record_path(sidecar_root / dep, dep)
        try:
            user = await anyio.to_thread.run_sync(_seed_record, path)
        except FileNotFoundError:
            continue  # its sidecar runs elsewhere: it has to be deployed again
        except (OSError, MailrunError) as exc:
            log.error("cannot give %s a NATS identity (record %s): %s", dep, path, exc)
            continue
        given += await store.transact(partial(_give, user=user, deployment_id=dep))
        log.info("deployment %s has a NATS identity now (%s)", dep, user)
    return given


def _give(tx: Tx, *, user: str, deployment_id: str) -> int:
    return tx.execute(_GIVE, (user, deployment_id))


def _seed_record(path: Path) -> str:
    """The record's seed's public key, after writing a new seed into it if it had none."""
    record, _ = read_restore_record(path)
    if record.nats_seed is not None:
        try:
            return public_key(record.nats_seed)
        except NatsIdentityError:
            log.warning("restore record %s holds a damaged NATS seed: replacing it", path)
    key = new_user_key()
    write_restore_record(path, msgspec.structs.replace(record, nats_seed=key.seed))
    return key.public
