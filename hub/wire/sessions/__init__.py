"""Who the hub talks to: sidecar sessions (the challenge/hello handshake),
the ownership claim a hello makes, the deployments this hub serves (all
of them, or those it holds a lease on), and those asleep (scale to zero)."""

from .hello import HelloHandler as HelloHandler
from .leasing import LeaseKeeper as LeaseKeeper
from .leasing import hub_identity as hub_identity
from .nonces import NONCE_TTL as NONCE_TTL
from .ownership import OWNER_LEASE as OWNER_LEASE
from .sleepers import MAX_WAIT as MAX_WAIT
from .sleepers import Sleepers as Sleepers
from .table import Session as Session
from .table import SessionTable as SessionTable

__all__ = [
    "MAX_WAIT",
    "NONCE_TTL",
    "OWNER_LEASE",
    "HelloHandler",
    "LeaseKeeper",
    "Session",
    "SessionTable",
    "Sleepers",
    "hub_identity",
]
