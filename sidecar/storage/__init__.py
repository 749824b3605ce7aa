"""Storage: everything the sidecar keeps in its inbox database (``inbox.db``).

The only room that holds SQL: :class:`Inbox` (the durable inbox the other
rooms use), the schema and its migrations, what a processing step writes,
a takeover from the hub's state, the processing position, and the records
the rows hold (envelopes, run state).
"""

from ._adopt import ADOPT_MARK as ADOPT_MARK
from ._envelope import Envelope as Envelope
from ._envelope import decode_envelope as decode_envelope
from ._envelope import decode_run_state as decode_run_state
from ._envelope import encode_envelope as encode_envelope
from ._envelope import encode_run_state as encode_run_state
from ._outbox import FREE_BYTES_KEPT as FREE_BYTES_KEPT
from ._outbox import Outgoing as Outgoing
from ._outbox import outgoing as outgoing
from ._outbox import processed as processed
from ._queue import Pending as Pending
from ._queue import RunRecord as RunRecord
from ._schema import SCHEMA_VERSION as SCHEMA_VERSION
from ._step import DEAD_LETTER as DEAD_LETTER
from ._step import Commit as Commit
from .inbox import Inbox as Inbox

__all__ = [
    "ADOPT_MARK",
    "DEAD_LETTER",
    "FREE_BYTES_KEPT",
    "SCHEMA_VERSION",
    "Commit",
    "Envelope",
    "Inbox",
    "Outgoing",
    "Pending",
    "RunRecord",
    "decode_envelope",
    "decode_run_state",
    "encode_envelope",
    "encode_run_state",
    "outgoing",
    "processed",
]
