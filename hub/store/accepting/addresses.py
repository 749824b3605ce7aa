"""Whether a mail address takes mail now: the SMTP ingress asks at RCPT time.

The answer is advisory. The accepting transaction decides again (a deployment
may be deleted, or its run may end, between RCPT and DATA); asking early only
lets a client hear "no such mailbox" for the one recipient, before it sends
the message, instead of a refusal of the whole message after it.

The address is read as the accept path reads it: ``name+tag@domain`` is
``name@domain``'s (a reply address too: its token is checked at DATA), and
an address no live deployment has is live when its domain has a catch-all.
"""

from __future__ import annotations

import enum

from runtime.wire import accepts_trigger, anchor_is_live

from ...mailbox import parse_address
from ..mail import catch_alls
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
    """What a mail to ``address`` (its base address, compared lower-cased,
    as ``POST /mail`` does) would meet, by the committed data."""
    parsed = parse_address(address)
    row = tx.fetch_one(_ADDRESS, (parsed.base,))
    if row is None or not anchor_is_live(row[0]):
        if catch_alls(tx, [parsed.domain]):
            return AddressStatus.LIVE  # its top-level run may have ended: DATA tells
        return AddressStatus.UNKNOWN if row is None else AddressStatus.DELETED
    return AddressStatus.LIVE if accepts_trigger(row[1]) else AddressStatus.ENDED
