"""What sidecars report (``hub.events``): a RunEvents frame's events applied in
one write transaction (grouped with other sidecars' frames waiting at the
same moment), processed dispatches as one batch, quarantined
envelopes set aside, and the mail runs send routed to a deployment or out."""

from .events import EventsHandler as EventsHandler
from .events import OutboundSink as OutboundSink
from .grouped import GroupCommit as GroupCommit

__all__ = ["EventsHandler", "GroupCommit", "OutboundSink"]
