"""The change feed: a row per change of a dispatch, a run or a deployment,
written by triggers in the transaction that makes it, read in id order and
trimmed to its newest rows."""

from .recording import DEFAULT_CHANGES_KEPT as DEFAULT_CHANGES_KEPT
from .recording import FEED_HOLD as FEED_HOLD
from .recording import Change as Change
from .recording import ChangeKind as ChangeKind
from .recording import add_change_feed as add_change_feed
from .recording import feed_start as feed_start
from .recording import last_change_id as last_change_id
from .recording import read_changes as read_changes
from .recording import read_feed as read_feed
from .recording import trim_changes as trim_changes

__all__ = [
    "DEFAULT_CHANGES_KEPT",
    "FEED_HOLD",
    "Change",
    "ChangeKind",
    "add_change_feed",
    "feed_start",
    "last_change_id",
    "read_changes",
    "read_feed",
    "trim_changes",
]
