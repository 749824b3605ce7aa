"""What a batch of triggers reads before it decides: the deployments it
names (by address or id) with their anchors, their runs, the approvals it
decides, and the dispatches its message ids already stand for.

Each lookup is a handful of statements whatever the batch's size, each of
them declared at import for every shape it takes.
"""

from __future__ import annotations

from ..sql import Row, Tx, json_array, sql

# A list of ids is one parameter, a JSON array (store-conventions): the
# statement's text is the same whatever the batch holds.
_IN_JSON = "IN (SELECT value FROM json_each(?))"
_IN_JSON_PG = "IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))"

# Its mail settings too: a mail's sender is checked against them, and a
# statement of their own cost each lone mail one more read.
_DEPLOYMENT_COLUMNS = "SELECT d.id, d.address, a.status, d.next_seq, d.version, d.mail_settings"
# CROSS JOIN: SQLite takes the deployment rows first (few), then each one's
# anchor by its key; left to guess, it read every run for the anchors.
_DEPLOYMENTS = (
    _DEPLOYMENT_COLUMNS
    + " FROM deployment d CROSS JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1 WHERE "
)
_DEPLOYMENTS_PG = (
    _DEPLOYMENT_COLUMNS
    + " FROM deployment d JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1 WHERE "
)
_LIVE_LAST = " ORDER BY d.deleted_at IS NULL, d.created_at, d.id"  # live rows win per address
# The anchor lock on PostgreSQL, where hubs accept at once: the deployment
# rows, locked in one order (no deadlock between two batches), read as the
# last commit left them; what the batch reads next (the top-level run, the
# message ids, the approvals again) is read after the lock, so it is the
# last commit's too. On SQLite, BEGIN IMMEDIATE already holds every row.
_LOCKED = " FOR UPDATE OF d"


# One statement per shape of the lookup: an ``IN`` over an empty list beside
# an OR kept SQLite from searching the indexes of the other side.
_BY_ADDRESS = sql(
    _DEPLOYMENTS + f"d.address {_IN_JSON}" + _LIVE_LAST,
    postgres=_DEPLOYMENTS_PG + f"d.address {_IN_JSON_PG}" + _LIVE_LAST + _LOCKED,
)
_BY_ID = sql(
    _DEPLOYMENTS + f"d.id {_IN_JSON}" + _LIVE_LAST,
    postgres=_DEPLOYMENTS_PG + f"d.id {_IN_JSON_PG}" + _LIVE_LAST + _LOCKED,
)
_BY_ADDRESS_OR_ID = sql(
    _DEPLOYMENTS + f"d.address {_IN_JSON} OR d.id {_IN_JSON}" + _LIVE_LAST,
    postgres=_DEPLOYMENTS_PG
    + f"d.address {_IN_JSON_PG} OR d.id {_IN_JSON_PG}"
    + _LIVE_LAST
    + _LOCKED,
)

_RUNS = """SELECT id, deployment_id, status, is_top_level,
 parent_run_id IS NOT NULL AND entrypoint IS NULL
FROM workflow_run WHERE is_anchor = 0 AND """
_TOP_LEVEL = sql(
    _RUNS + f"is_top_level = 1 AND deployment_id {_IN_JSON}",
    postgres=_RUNS + f"is_top_level = 1 AND deployment_id {_IN_JSON_PG}",
)
_TOP_LEVEL_OR_NAMED = sql(
    _RUNS + f"((is_top_level = 1 AND deployment_id {_IN_JSON}) OR id {_IN_JSON})",
    postgres=_RUNS + f"((is_top_level = 1 AND deployment_id {_IN_JSON_PG}) OR id {_IN_JSON_PG})",
)

_APPROVALS = """SELECT a.id, a.run_id, r.deployment_id, a.status FROM approval a
JOIN workflow_run r ON r.id = a.run_id WHERE a.id """
_APPROVALS_BY_ID = sql(_APPROVALS + _IN_JSON, postgres=_APPROVALS + _IN_JSON_PG)

# The dispatches of one deployment with any of a list of message ids: what a
# retry is answered from. One deployment at a time, so that SQLite searches
# the (deployment_id, message_id) index; a row-value ``IN (VALUES ...)`` over
# several deployments read the whole table for every batch.
_PRIOR = """SELECT id, run_id, deployment_id, seq, message_id, status, last_error,
 kind, sender, subject, body, COALESCE(body_digest, inline_digest), body_size
FROM workflow_run_dispatch WHERE deployment_id = ? AND message_id """
PRIOR_DISPATCHES = sql(_PRIOR + _IN_JSON, postgres=_PRIOR + _IN_JSON_PG)


def deployments(tx: Tx, addresses: list[str], ids: list[str]) -> list[Row]:
    """The deployments at ``addresses`` or with ``ids`` (``id, address,
    anchor status, next_seq, version, mail_settings``), live rows last so that they win
    per address; on PostgreSQL locked for the rest of the transaction."""
    if addresses and ids:
        return tx.fetch_all(_BY_ADDRESS_OR_ID, (json_array(addresses), json_array(ids)))
    if addresses or ids:
        return tx.fetch_all(_BY_ADDRESS if addresses else _BY_ID, (json_array(addresses or ids),))
    return []


def runs(tx: Tx, deployment_ids: list[str], run_ids: list[str]) -> list[Row]:
    """The top-level runs of ``deployment_ids`` and the runs ``run_ids``
    (``id, deployment_id, status, is_top_level, unstarted``: a child run
    whose start item is not accepted yet)."""
    deps = json_array(deployment_ids)
    if run_ids:
        return tx.fetch_all(_TOP_LEVEL_OR_NAMED, (deps, json_array(run_ids)))
    return tx.fetch_all(_TOP_LEVEL, (deps,))


def approvals(tx: Tx, approval_ids: list[str]) -> list[Row]:
    """The approvals ``approval_ids`` (``id, run_id, deployment_id, status``)."""
    if not approval_ids:
        return []
    return tx.fetch_all(_APPROVALS_BY_ID, (json_array(approval_ids),))


def prior_dispatches(tx: Tx, deployment_id: str, message_ids: list[str]) -> list[Row]:
    """The dispatches of ``deployment_id`` with any of ``message_ids``: the
    answer of each, and its content (``id, run_id, deployment_id, seq,
    message_id, status, last_error``, then ``kind, sender, subject, body,
    digest, body_size``)."""
    return tx.fetch_all(PRIOR_DISPATCHES, (deployment_id, json_array(message_ids)))
