"""Whether a mail address takes mail now: the SMTP ingress asks at RCPT time.

The answer is advisory. The accepting transaction decides again (a deployment
may be deleted, or its run may end, between RCPT and DATA); asking early only
lets a client hear "no such mailbox" for the one recipient, before it sends
the message, instead of a refusal of the whole message after it.
"""

from __future__ import annotations

import enum

from runtime.wire import accepts_trigger, anchor_is_live

from ..sql import Tx, sql


class AddressStatus(enum.Enum):
    LIVE = "live"  # takes mail (its run, if any, is not terminal)
    UNKNOWN = "unknown"  # no deployment ever had it
    DELETED = "deleted"  # its deployment is deleted
    ENDED = "ended"  # its top-level run is terminal: every mail would be refused


# A deleted deployment's address may be taken again by a new one: the live row wins.
_ADDRESS = sql("""
SELECT a.status,
       (SELECT t.status FROM workflow_run t WHERE t.deployment_id = d.id AND t.is_top_level = 1)
FROM deployment d JOIN workflow_run a ON a.id = d.id AND a.is_anchor = 1
WHERE d.address = ? ORDER BY d.deleted_at IS NULL DESC, d.created_at DESC LIMIT 1""")


def address_status(tx: Tx, address: str) -> AddressStatus:
    """What a mail to ``address`` (compared lower-cased, as ``POST /mail``
    does) would meet, by the committed data."""
    row = tx.fetch_one(_ADDRESS, (address.strip().lower(),))
    if row is None:
        return AddressStatus.UNKNOWN
    anchor, run = row
    if not anchor_is_live(anchor):
        return AddressStatus.DELETED
    return AddressStatus.LIVE if accepts_trigger(run) else AddressStatus.ENDED
