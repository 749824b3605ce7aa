"""Acceptance in the store: triggers read-or-minted into dispatches in one
transaction (``accept_triggers``), in groups some of which are all or none
(``accept_groups``), and whether an address takes mail now. What a trigger
and its receipt are is ``triggers.py``."""

from .accept import accept_alone as accept_alone
from .accept import accept_triggers as accept_triggers
from .accept import conflict_outcome as conflict_outcome
from .addresses import AddressStatus as AddressStatus
from .addresses import address_status as address_status
from .triggers import WITH_OTHERS as WITH_OTHERS
from .triggers import Accepted as Accepted
from .triggers import Outcome as Outcome
from .triggers import Receipt as Receipt
from .triggers import RefusedByRun as RefusedByRun
from .triggers import Rejected as Rejected
from .triggers import Trigger as Trigger
from .triggers import body_digest as body_digest
from .triggers import decision_trigger as decision_trigger
from .wholes import accept_groups as accept_groups

__all__ = [
    "WITH_OTHERS",
    "Accepted",
    "AddressStatus",
    "Outcome",
    "Receipt",
    "RefusedByRun",
    "Rejected",
    "Trigger",
    "accept_alone",
    "accept_groups",
    "accept_triggers",
    "address_status",
    "body_digest",
    "conflict_outcome",
    "decision_trigger",
]
