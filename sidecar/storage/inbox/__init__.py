"""The durable inbox: :class:`Inbox`, one SQLite file per deployment.

Its operations by what they serve: delivery (frames stored, the hub's floor,
a takeover), the search for the next batch, what processing writes (in-flight
marks, recorded steps, a step's commit), and the hub's acknowledgements; all
share what the inbox knows of its rows without a query (``_state.py``).
"""

from ._inbox import Inbox as Inbox

__all__ = ["Inbox"]
