"""Who the hub talks to: sidecar sessions (the challenge/hello handshake),
the ownership claim a hello makes, and the deployments this hub serves (all
of them, or those it holds a lease on)."""

from .leasing import LeaseKeeper as LeaseKeeper
from .leasing import hub_identity as hub_identity
from .ownership import OWNER_LEASE as OWNER_LEASE
from .sessions import NONCE_TTL as NONCE_TTL
from .sessions import HelloHandler as HelloHandler
from .sessions import Session as Session
from .sessions import SessionTable as SessionTable

__all__ = [
    "NONCE_TTL",
    "OWNER_LEASE",
    "HelloHandler",
    "LeaseKeeper",
    "Session",
    "SessionTable",
    "hub_identity",
]
