"""A domain's catch-all: the one live deployment that takes mail to any
address at its domain that no live deployment has.

``deployment.catch_all_domain`` holds the domain of the deployment's own
address while it is the catch-all, else NULL; a unique index over live rows
keeps one per domain, and a deleted deployment stops being one with no
write (its row is no longer live). The mail settings' ``catch_all`` flag
(``settings.py``) is set through :func:`set_catch_all`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..._errors import CatchAllTaken, UnknownDeployment
from ..sql import Tx, json_array, sql

_LIVE = sql("SELECT address FROM deployment WHERE id = ? AND deleted_at IS NULL")
_HOLDER = sql(
    "SELECT id, name FROM deployment WHERE catch_all_domain = ? AND deleted_at IS NULL AND id <> ?"
)
_SET = sql("UPDATE deployment SET catch_all_domain = ? WHERE id = ?")
_OF_DOMAINS = sql(
    "SELECT catch_all_domain, id FROM deployment WHERE deleted_at IS NULL"
    " AND catch_all_domain IN (SELECT value FROM json_each(?))",
    postgres="SELECT catch_all_domain, id FROM deployment WHERE deleted_at IS NULL"
    " AND catch_all_domain IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))",
)


def set_catch_all(tx: Tx, deployment_id: str, on: bool) -> str | None:
    """Make the live deployment ``deployment_id`` its domain's catch-all
    (``on``) or not; return the domain it now takes (None: none). Raises
    :class:`CatchAllTaken` (409 ``catch_all_taken``) when another live
    deployment is that domain's catch-all, :class:`UnknownDeployment` when
    ``deployment_id`` is not live."""
    row = tx.fetch_one(_LIVE, (deployment_id,))
    if row is None:
        raise UnknownDeployment(f"no live deployment {deployment_id}")
    domain = str(row[0]).rpartition("@")[2] if on else None
    if domain is not None:
        holder = tx.fetch_one(_HOLDER, (domain, deployment_id))
        if holder is not None:
            raise CatchAllTaken(f"{holder[1]} ({holder[0]}) already takes @{domain}'s unknown mail")
    tx.execute(_SET, (domain, deployment_id))
    return domain


def catch_alls(tx: Tx, domains: Sequence[str]) -> dict[str, str]:
    """The catch-all deployment of each of ``domains`` that has one (domain -> id)."""
    if not domains:
        return {}
    return {str(d): str(i) for d, i in tx.fetch_all(_OF_DOMAINS, (json_array(sorted(domains)),))}
