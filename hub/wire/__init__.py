"""The hub's NATS side: sessions, dispatch rounds, event ingestion, child
minting, claim-check blobs, quarantine, sidecar health and retention."""

from .dispatcher import DispatchConfig as DispatchConfig
from .health import HealthConfig as HealthConfig
from .retention import RetentionConfig as RetentionConfig
from .service import Wire as Wire
from .service import WireConfig as WireConfig
from .service import run_wire as run_wire

__all__ = ["DispatchConfig", "HealthConfig", "RetentionConfig", "Wire", "WireConfig", "run_wire"]
