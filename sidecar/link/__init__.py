"""The hub link: everything that talks to the hub over NATS.

The session (hello, challenge, welcome) and the requests made under it,
the delivery of ``mail.inbound`` frames into the inbox, the control
frames that come on the same subject (on a task of their own), the
shipper that sends the outbox's events to the hub until they are
acknowledged, and the activity they all mark (what keeps the sidecar awake).
"""

from ._activity import Activity as Activity
from ._control import Control as Control
from ._delivery import Delivery as Delivery
from ._hello import Identity as Identity
from ._hello import Session as Session
from ._session import HubLink as HubLink
from ._shipper import Shipper as Shipper

__all__ = ["Activity", "Control", "Delivery", "HubLink", "Identity", "Session", "Shipper"]
