"""Whom a deployment takes mail from, as the doors ask it: the settings of
the deployments a batch of triggers names (the accepting transaction's
check, for every door), and of the deployment an SMTP recipient reaches
(RCPT and DATA ask it before the message is taken)."""

from __future__ import annotations

from ...mailbox import parse_address
from ..sql import Tx, json_array, sql
from .settings import MailSettings, decode_settings

_IN_JSON = "IN (SELECT value FROM json_each(?))"
_IN_JSON_PG = "IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))"
_SETTINGS = "SELECT id, mail_settings FROM deployment WHERE mail_settings IS NOT NULL AND id "
_SETTINGS_OF = sql(_SETTINGS + _IN_JSON, postgres=_SETTINGS + _IN_JSON_PG)
# The live deployment at the address, else its domain's live catch-all.
_AT = sql(
    "SELECT mail_settings, catch_all_domain FROM deployment WHERE deleted_at IS NULL"
    " AND (address = ? OR catch_all_domain = ?) ORDER BY address = ? DESC LIMIT 1"
)


def settings_of(tx: Tx, deployment_ids: list[str]) -> dict[str, MailSettings]:
    """The settings of those of ``deployment_ids`` that have any (a deployment
    with every default is not in the answer)."""
    if not deployment_ids:
        return {}
    rows = tx.fetch_all(_SETTINGS_OF, (json_array(deployment_ids),))
    return {str(row[0]): decode_settings(row[1]) for row in rows}


def settings_at(tx: Tx, address: str) -> MailSettings | None:
    """The settings of the live deployment mail to ``address`` reaches (its
    base address's, else its domain's catch-all); None: no deployment."""
    parsed = parse_address(address)
    row = tx.fetch_one(_AT, (parsed.base, parsed.domain, parsed.base))
    return None if row is None else decode_settings(row[0], row[1])
