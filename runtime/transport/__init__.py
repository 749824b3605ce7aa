"""The transport seam: the protocols hub and sidecar program against
(Transport, Subscription, Message), NATS behind them (open_nats, nats-py
imported without its websocket side), and the NATS subject grammar both
transports check.

The in-memory bus behind the same seam is test tooling: ``runtime.testing``.
"""

from ._nats_open import open_nats as open_nats
from ._protocol import Message as Message
from ._protocol import ReconnectCallback as ReconnectCallback
from ._protocol import Subscription as Subscription
from ._protocol import Transport as Transport
from ._subjects import subject_matches as subject_matches
from ._subjects import validate_subject as validate_subject

__all__ = [
    "Message",
    "ReconnectCallback",
    "Subscription",
    "Transport",
    "open_nats",
    "subject_matches",
    "validate_subject",
]
