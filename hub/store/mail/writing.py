"""A deployment's mail settings written: at its creation and by ``PATCH``,
inside the caller's write transaction, checked whole first.

``catch_all`` is the ``catch_all_domain`` column, written by
:func:`~.catch_all.set_catch_all` (409 ``catch_all_taken`` when another live
deployment holds that domain).
"""

from __future__ import annotations

from runtime.wire import anchor_is_live

from ..._errors import DeploymentNotLive, UnknownDeployment
from ..sql import Tx, sql
from .catch_all import set_catch_all
from .settings import MailChange, MailSettings, changed_settings, decode_settings, encode_settings

_READ = sql(
    "SELECT d.mail_settings, d.catch_all_domain, d.address, a.status FROM deployment d"
    " JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1 WHERE d.id = ?"
)
_WRITE = sql("UPDATE deployment SET mail_settings = ? WHERE id = ?")


def set_mail_settings(tx: Tx, deployment_id: str, change: MailChange) -> MailSettings:
    """Inside a write transaction: apply ``change`` to a live deployment's
    mail settings; the settings now in force."""
    row = tx.fetch_one(_READ, (deployment_id,))
    if row is None:
        raise UnknownDeployment(f"no deployment {deployment_id!r}")
    text, catch_all_domain, _, anchor = row
    if not anchor_is_live(str(anchor)):
        raise DeploymentNotLive(f"deployment {deployment_id} is deleted")
    settings = changed_settings(decode_settings(text, catch_all_domain), change)
    set_catch_all(tx, deployment_id, settings.catch_all)
    tx.execute(_WRITE, (encode_settings(settings), deployment_id))
    return settings
