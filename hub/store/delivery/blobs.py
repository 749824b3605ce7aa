"""The blobs dispatches and versions name: who may read one, and collecting
those nobody names any more.

A claim-checked body and a raw message are blobs while a dispatch that is
not processed (or is parked: a retry sends it again) names them; a
version's sources are blobs for good. A sidecar reads only blobs named by
its own deployment's dispatches or versions. On PostgreSQL, where another
hub may be naming a blob again in a transaction this one cannot see yet,
only blobs older than :data:`SHARED_GRACE` are collected (an accept makes a
blob it names new again): the statement says so in its PostgreSQL text.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from ..schema import DispatchStatus
from ..sql import Tx, sql

SHARED_GRACE = 300.0
"""Seconds a blob is kept on PostgreSQL after it was last named."""


class Collected(NamedTuple):
    """What one collection did."""

    deleted: int
    left: bool
    """Whether a blob other than a version's sources is left (in flight)."""


def _collect(older_than: str) -> str:
    return f"""
DELETE FROM blob WHERE NOT EXISTS (
  SELECT 1 FROM workflow_run_dispatch d
  WHERE d.body_digest = blob.digest AND d.status IN (?1, ?2, ?4))
AND NOT EXISTS (
  SELECT 1 FROM workflow_run_dispatch d
  WHERE d.raw_digest = blob.digest AND d.status IN (?1, ?2, ?4))
AND NOT EXISTS (SELECT 1 FROM deployment_version v WHERE v.digest = blob.digest)
AND blob.created_at < {older_than}
"""


_COLLECT = sql(_collect("?3"), postgres=_collect(f"?3 - {SHARED_GRACE}"))
_LEFT = sql(
    "SELECT EXISTS (SELECT 1 FROM blob WHERE NOT EXISTS"
    " (SELECT 1 FROM deployment_version v WHERE v.digest = blob.digest))"
)
_NAMED = sql(
    "SELECT EXISTS (SELECT 1 FROM workflow_run_dispatch WHERE body_digest = ?1"
    " AND deployment_id = ?2) OR EXISTS (SELECT 1 FROM workflow_run_dispatch"
    " WHERE raw_digest = ?1 AND deployment_id = ?2) OR EXISTS (SELECT 1 FROM"
    " deployment_version WHERE digest = ?1 AND deployment_id = ?2)"
)


def collect_blobs(tx: Tx) -> Collected:
    """Inside a write transaction: delete every body and raw message no
    unprocessed or parked dispatch names (a version's sources stay)."""
    params = (
        DispatchStatus.RESERVED,
        DispatchStatus.DELIVERED,
        time.time(),
        DispatchStatus.PARKED,
    )
    deleted = tx.execute(_COLLECT, params)
    row = tx.fetch_one(_LEFT)
    return Collected(max(deleted, 0), bool(row and row[0]))


def blob_named(tx: Tx, digest: str, deployment_id: str) -> bool:
    """Whether a dispatch or a version of the deployment names the blob."""
    row = tx.fetch_one(_NAMED, (digest, deployment_id))
    return row is not None and bool(row[0])
