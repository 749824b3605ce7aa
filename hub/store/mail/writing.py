"""A deployment's mail settings written: at its creation and by ``PATCH``,
inside the caller's write transaction, checked whole first.

``catch_all`` is the ``catch_all_domain`` column: the domain of the
deployment's address while it is on, NULL while it is off. Another live
deployment holding that domain already is 409 ``catch_all_taken``, asked
before the write so that the unique index never has to refuse it.
"""

from __future__ import annotations

from runtime.wire import anchor_is_live

from ..._errors import CatchAllTaken, DeploymentNotLive, UnknownDeployment
from ...mailbox import parse_address
from ..sql import Tx, sql
from .settings import MailChange, MailSettings, changed_settings, decode_settings, encode_settings

_READ = sql(
    "SELECT d.mail_settings, d.catch_all_domain, d.address, a.status FROM deployment d"
    " JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1 WHERE d.id = ?"
)
_CATCH_ALL_HOLDER = sql(
    "SELECT id FROM deployment WHERE catch_all_domain = ? AND deleted_at IS NULL AND id <> ?"
)
_WRITE = sql("UPDATE deployment SET mail_settings = ?, catch_all_domain = ? WHERE id = ?")


def set_mail_settings(tx: Tx, deployment_id: str, change: MailChange) -> MailSettings:
    """Inside a write transaction: apply ``change`` to a live deployment's
    mail settings; the settings now in force."""
    row = tx.fetch_one(_READ, (deployment_id,))
    if row is None:
        raise UnknownDeployment(f"no deployment {deployment_id!r}")
    text, catch_all_domain, address, anchor = row
    if not anchor_is_live(str(anchor)):
        raise DeploymentNotLive(f"deployment {deployment_id} is deleted")
    settings = changed_settings(decode_settings(text, catch_all_domain), change)
    domain = parse_address(str(address)).domain if settings.catch_all else None
    if domain is not None:
        holder = tx.fetch_one(_CATCH_ALL_HOLDER, (domain, deployment_id))
        if holder is not None:
            raise CatchAllTaken(f"{holder[0]} already takes the unknown addresses of {domain}")
    tx.execute(_WRITE, (encode_settings(settings), domain, deployment_id))
    return settings
