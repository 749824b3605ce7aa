"""Dead letters: what could not be used, kept where an operator looks, within caps.

Each source (``source`` and the deployment that sent it; NULL on a shared
subject, where anyone may publish) keeps its latest letters up to a cap,
and the table its latest up to another; what goes beyond is deleted as a
letter comes in. Whether a letter is kept at all (its source's rate) is the
caller's decision (``hub.wire.retention``). Quarantined envelopes are
exempt from both caps: each is a dispatch the hub cancelled, bounded by the
mail a deployment got, and counted on the deployment.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schema import QUARANTINE_SOURCE
from ..sql import Tx, sql


@dataclass(frozen=True, slots=True)
class DeadLetter:
    source: str
    """What it came to: a subject's handler (``events``, ``hello``, ...)."""
    subject: str
    reason: str
    data: bytes
    deployment_id: str | None
    """The sender (its own subject proves it), or None on a shared subject."""
    at: float


_KEEP = sql(
    "INSERT INTO dead_letter (source, subject, reason, data, at, deployment_id)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_TRIM_SOURCE = sql(
    "DELETE FROM dead_letter WHERE source = ? AND deployment_id IS ? AND id <= ("
    "SELECT id FROM dead_letter WHERE source = ? AND deployment_id IS ?"
    " ORDER BY id DESC LIMIT 1 OFFSET ?)",
    postgres="DELETE FROM dead_letter WHERE source = ? AND deployment_id IS NOT DISTINCT FROM ?"
    " AND id <= (SELECT id FROM dead_letter WHERE source = ?"
    " AND deployment_id IS NOT DISTINCT FROM ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
)
_TRIM_ALL = sql(
    "DELETE FROM dead_letter WHERE source != ? AND id <= ("
    "SELECT id FROM dead_letter WHERE source != ? ORDER BY id DESC LIMIT 1 OFFSET ?)"
)


def keep_dead_letter(tx: Tx, letter: DeadLetter, per_source: int, total: int) -> int:
    """Inside the caller's write transaction: keep ``letter``, then trim its
    source to its ``per_source`` latest and the table to its ``total``
    latest (quarantines exempt); how many letters the caps deleted."""
    tx.execute(
        _KEEP,
        (
            letter.source,
            letter.subject,
            letter.reason,
            letter.data,
            letter.at,
            letter.deployment_id,
        ),
    )
    if letter.source == QUARANTINE_SOURCE:
        return 0
    key = (letter.source, letter.deployment_id)
    trimmed = max(tx.execute(_TRIM_SOURCE, (*key, *key, per_source)), 0)
    params = (QUARANTINE_SOURCE, QUARANTINE_SOURCE, total)
    return trimmed + max(tx.execute(_TRIM_ALL, params), 0)
