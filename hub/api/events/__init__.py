"""``GET /events``: the change feed's one reader (``feed``) and the
server-sent event streams it serves (``stream``)."""

from .feed import ChangeFeed as ChangeFeed
from .feed import EventLimits as EventLimits
from .stream import event_routes as event_routes

__all__ = ["ChangeFeed", "EventLimits", "event_routes"]
