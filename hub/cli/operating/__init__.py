"""Commands that operate a running hub over its HTTP API: deploy, send, list
and inspect, signal and approve, versions and rollbacks (``commands``), the
NATS ingress's producers, replay and watch. Steering runs and deployments
from outside is a room of its own (``steering``)."""

from .commands import COMMANDS as COMMANDS
from .producers import producer as producer
from .replay import replay as replay
from .watch import watch as watch

__all__ = ["COMMANDS", "producer", "replay", "watch"]
