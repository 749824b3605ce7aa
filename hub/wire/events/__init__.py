"""What sidecars report (``hub.events``): a RunEvents frame's events applied in
one write transaction, processed dispatches as one batch, quarantined
envelopes set aside, and the mail runs send routed to a deployment or out."""

from .events import EventsHandler as EventsHandler
from .events import OutboundSink as OutboundSink

__all__ = ["EventsHandler", "OutboundSink"]
