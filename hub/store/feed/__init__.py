"""The change feed: a row per change of a dispatch, a run or a deployment,
written by triggers in the transaction that makes it (``recording.py``),
read in id order and trimmed to its newest rows (``reading.py``)."""

from .reading import DEFAULT_CHANGES_KEPT as DEFAULT_CHANGES_KEPT
from .reading import FEED_HOLD as FEED_HOLD
from .reading import database_now as database_now
from .reading import feed_start as feed_start
from .reading import last_change_id as last_change_id
from .reading import read_changes as read_changes
from .reading import read_feed as read_feed
from .reading import settled_changes as settled_changes
from .reading import settled_horizon as settled_horizon
from .reading import trim_changes as trim_changes
from .recording import DEPLOYMENT_FEED_PG as DEPLOYMENT_FEED_PG
from .recording import NOW as NOW
from .recording import Change as Change
from .recording import ChangeKind as ChangeKind
from .recording import add_change_feed as add_change_feed
from .recording import add_deployment_feed as add_deployment_feed

__all__ = [
    "DEFAULT_CHANGES_KEPT",
    "FEED_HOLD",
    "Change",
    "feed_start",
    "last_change_id",
    "read_changes",
    "read_feed",
    "trim_changes",
]
