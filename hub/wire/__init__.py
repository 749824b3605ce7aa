"""The hub's NATS side: sessions, dispatch rounds, event ingestion, child
minting, claim-check blobs, quarantine, sidecar health, retention, the
producers' mail ingress, and the leases by which several hubs share the
deployments."""

from .dispatcher import DispatchConfig as DispatchConfig
from .health import HealthConfig as HealthConfig
from .ingress import IngressConfig as IngressConfig
from .ingress import run_ingress as run_ingress
from .leasing import LeaseKeeper as LeaseKeeper
from .leasing import hub_identity as hub_identity
from .retention import DeadLetters as DeadLetters
from .retention import RetentionConfig as RetentionConfig
from .service import Wire as Wire
from .service import WireConfig as WireConfig
from .service import run_wire as run_wire

__all__ = [
    "DeadLetters",
    "DispatchConfig",
    "HealthConfig",
    "IngressConfig",
    "LeaseKeeper",
    "RetentionConfig",
    "Wire",
    "WireConfig",
    "hub_identity",
    "run_ingress",
    "run_wire",
]
