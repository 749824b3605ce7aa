"""Creating and deleting deployments.

Name uniqueness among live deployments is enforced by the partial unique
indexes on ``deployment`` (a concurrent create of the same name loses at
INSERT time), never by a read before the write. Delete is one conditional
UPDATE of the anchor plus, in the same transaction, the cancellation of
everything the deployment still had open (its pending timers dropped) and the
removal of its schedules.
"""

from __future__ import annotations

import logging
import re
import time
from functools import partial
from pathlib import Path

import anyio
import msgspec

from runtime import (
    InvalidSources,
    RestoreRecord,
    RunStatus,
    Sources,
    check_layout,
    is_live,
    new_id,
    record_path,
    write_restore_record,
)
from runtime.sidecar_contract import HubKey, remove_sidecar_state
from runtime.wire import DeploymentStatus, b64url, generate_keypair

from ..._errors import InvalidDeployment, InvalidName, NameTaken
from ...natsauth import new_user_key
from ..base import Store
from ..clock import drop_deployment_timers, drop_schedules
from ..mail import MailChange, set_mail_settings
from ..schema import KEEPS_BODY, DispatchStatus
from ..sql import Tx, json_array, sql
from .policy import PolicyChange, check_policy, write_policy
from .versions import insert_first_version

log = logging.getLogger("mailrun.hub.deploy")

# Matched whole (fullmatch): ``$`` alone would let a trailing newline through.
NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,62}")
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
ENTRYPOINT_RE = re.compile(rf"{_IDENT}(\.{_IDENT})*:{_IDENT}")
MAX_ENTRYPOINT = 255
DEFAULT_ENTRYPOINT = "flow:main"
_LIVE_RUN = json_array(s.value for s in RunStatus if is_live(s))

# A live deployment with the name (or its address) already: no row, and no
# error, which would leave a PostgreSQL transaction unusable. Its id and
# keys are new, so only the name or the address can be taken.
_INSERT = sql(
    "INSERT INTO deployment (id, name, address, public_key, sources, entrypoint,"
    " created_at, nats_user) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_INSERT_ANCHOR = sql(
    "INSERT INTO workflow_run (id, deployment_id, is_anchor, status, created_at,"
    " updated_at) VALUES (?, ?, 1, ?, ?, ?)"
)
_DELETE_ANCHOR = sql(
    "UPDATE workflow_run SET status = ?, updated_at = ?"
    " WHERE id = ? AND is_anchor = 1 AND status = ?"
)
# The epoch bump fences the owner in this same step: every frame it sends
# from now on names an epoch that is no longer current.
_DELETED = sql(
    "UPDATE deployment SET deleted_at = ?, owner_instance = NULL,"
    " owner_epoch = owner_epoch + 1 WHERE id = ?"
)
# Parked ones too: nothing can retry them once the deployment is gone.
_CANCEL_DISPATCHES = sql(
    "UPDATE workflow_run_dispatch SET status = ? WHERE deployment_id = ? AND status IN (?, ?, ?)"
)
_CANCEL_RUNS = sql(
    "UPDATE workflow_run SET status = ?, updated_at = ? WHERE deployment_id = ?"
    " AND is_anchor = 0 AND status IN (SELECT value FROM json_each(?))",
    postgres="UPDATE workflow_run SET status = ?, updated_at = ? WHERE deployment_id = ?"
    " AND is_anchor = 0 AND status IN"
    " (SELECT value FROM json_array_elements_text(CAST(? AS json)))",
)
# Bodies and raw messages only this deployment's now-cancelled dispatches named.
_DROP_BLOBS = sql("""
DELETE FROM blob WHERE digest IN (
  SELECT body_digest FROM workflow_run_dispatch
  WHERE deployment_id = ?1 AND body_digest IS NOT NULL
  UNION SELECT raw_digest FROM workflow_run_dispatch
  WHERE deployment_id = ?1 AND raw_digest IS NOT NULL)
AND NOT EXISTS (SELECT 1 FROM workflow_run_dispatch d
  WHERE (d.body_digest = blob.digest OR d.raw_digest = blob.digest)
  AND d.status IN (?2, ?3, ?4))
""")


class Created(msgspec.Struct, kw_only=True):
    deployment_id: str
    join_token: str
    restore_record: str | None  # where the local sidecar's record was written


def validate_name(name: str) -> None:
    if not NAME_RE.fullmatch(name):
        raise InvalidName(
            f"invalid deployment name {name[:80]!r}: lowercase letter first, then up to 62 "
            "lowercase letters, digits or '-'"
        )


def module_file(entrypoint: str) -> str:
    """``pkg.flow:main`` -> ``pkg/flow.py``: where ``source`` is saved."""
    return entrypoint.split(":", 1)[0].replace(".", "/") + ".py"


def build_sources(entrypoint: str, source: str | None, files: dict[str, str] | None) -> Sources:
    """Validate the workflow code of a deployment request: the entrypoint's
    grammar, and a file layout every sidecar can write (``check_layout``)."""
    if len(entrypoint) > MAX_ENTRYPOINT or not ENTRYPOINT_RE.fullmatch(entrypoint):
        raise InvalidDeployment(f"entrypoint {entrypoint[:80]!r} is not 'module:attr'")
    if (source is None) == (files is None):
        raise InvalidDeployment("give exactly one of 'source' and 'files'")
    module = module_file(entrypoint)
    files = {module: source} if source is not None else dict(files or {})
    try:
        check_layout(files)
    except InvalidSources as exc:
        raise InvalidDeployment(str(exc)) from None
    package_init = module.removesuffix(".py") + "/__init__.py"
    if module not in files and package_init not in files:
        raise InvalidDeployment(f"entrypoint module file {module!r} is not among 'files'")
    return Sources(entrypoint=entrypoint, files=files)


async def create_deployment(
    store: Store,
    *,
    name: str,
    entrypoint: str = DEFAULT_ENTRYPOINT,
    source: str | None = None,
    files: dict[str, str] | None = None,
    domain: str,
    nats_url: str,
    subject_prefix: str,
    sidecar_root: Path | None = None,
    policy: PolicyChange | None = None,
    mail: MailChange | None = None,
) -> Created:
    """Create a deployment and its anchor row (with ``policy``'s and
    ``mail``'s settings, the defaults for the others); return its id and
    join token."""
    validate_name(name)
    sources = build_sources(entrypoint, source, files)
    policy = check_policy(policy or PolicyChange())
    dep_id = new_id("dep")
    address = f"{name}@{domain.lower()}"  # POST /mail lower-cases 'to' the same way
    seed, public_key = generate_keypair()
    # Its NATS identity: the seed goes only where the deployment key goes.
    nats = new_user_key()
    now = time.time()

    def body(tx: Tx) -> None:
        row = (dep_id, name, address, public_key, msgspec.json.encode(sources).decode(),
               entrypoint, now, nats.public)  # fmt: skip
        if tx.execute(_INSERT, row) != 1:
            raise NameTaken(f"a live deployment is already named {name!r}")
        tx.execute(_INSERT_ANCHOR, (dep_id, dep_id, DeploymentStatus.DEPLOYED.value, now, now))
        insert_first_version(tx, dep_id, sources, now)
        if not policy.is_empty():
            write_policy(tx, dep_id, policy)
        if mail is not None:
            set_mail_settings(tx, dep_id, mail)

    await store.transact(body, heavy=True)  # the sources may be megabytes
    log.info("deployment created id=%s name=%s address=%s", dep_id, name, address)
    record = RestoreRecord(
        deployment_id=dep_id,
        address=address,
        hub_key=HubKey(seed=seed),
        public_key=public_key,
        sources=sources,
        nats_url=nats_url,
        subject_prefix=subject_prefix,
        nats_seed=nats.seed,
    )
    join_token = b64url(msgspec.json.encode(record))
    written: str | None = None
    if sidecar_root is not None:
        # After commit: a crash before this leaves a deployment without a
        # local record (recoverable with the join token), never a record
        # without a deployment.
        path = record_path(sidecar_root / dep_id, dep_id)
        try:
            await anyio.to_thread.run_sync(write_restore_record, path, record)
            written = str(path)
        except OSError as exc:
            log.error("cannot write restore record for %s at %s: %s", dep_id, path, exc)
    return Created(deployment_id=dep_id, join_token=join_token, restore_record=written)


async def delete_deployment(
    store: Store, deployment_id: str, *, sidecar_root: Path | None = None
) -> bool:
    """Delete a live deployment; False when it was already deleted (idempotent).

    With ``sidecar_root``, the local sidecar's state dir (restore record with
    the private key, inbox, sources) is removed after the commit, unless that
    sidecar still runs from it: then whoever stops it removes it (``mailrun
    up`` does, once its sidecar has stopped)."""
    if not await store.transact(partial(_delete, deployment_id=deployment_id, now=time.time())):
        return False

    log.info("deployment deleted id=%s", deployment_id)
    if sidecar_root is not None:
        await _remove_local_sidecar(sidecar_root / deployment_id, deployment_id)
    return True


def _delete(tx: Tx, deployment_id: str, now: float) -> bool:
    deleted = (DeploymentStatus.DELETED.value, now, deployment_id, DeploymentStatus.DEPLOYED.value)
    if tx.execute(_DELETE_ANCHOR, deleted) == 0:
        return False
    drop_schedules(tx, deployment_id)
    tx.execute(_DELETED, (now, deployment_id))
    tx.execute(_CANCEL_DISPATCHES, (DispatchStatus.CANCELLED.value, deployment_id, *KEEPS_BODY))
    tx.execute(_CANCEL_RUNS, (RunStatus.CANCELLED.value, now, deployment_id, _LIVE_RUN))
    tx.execute(_DROP_BLOBS, (deployment_id, *KEEPS_BODY))
    drop_deployment_timers(tx, deployment_id)
    return True


async def _remove_local_sidecar(directory: Path, deployment_id: str) -> None:
    # After commit: a crash before this leaves files of a deleted deployment,
    # which `up` removes; never a live deployment without its files.
    try:
        gone = await anyio.to_thread.run_sync(remove_sidecar_state, directory, deployment_id)
    except OSError as exc:
        log.error("cannot remove %s of deleted deployment %s: %s", directory, deployment_id, exc)
        return
    if not gone:
        log.info(
            "sidecar of %s still runs from %s: removed once it stops", deployment_id, directory
        )
