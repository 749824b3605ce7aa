"""Scale to zero in the store: the sleep row of a deployment whose sidecar
fell asleep (migration 21), granted in one transaction, deleted by the next
Welcome, marked when a wake is requested, and the asleep deployments that
have work."""

from .schema import SLEEP_PG as SLEEP_PG
from .schema import add_sleep as add_sleep
from .sleeping import BUSY_RESERVED as BUSY_RESERVED
from .sleeping import BUSY_ROLLOUT as BUSY_ROLLOUT
from .sleeping import asleep_deployments as asleep_deployments
from .sleeping import deployments_to_wake as deployments_to_wake
from .sleeping import grant_sleep as grant_sleep
from .sleeping import is_asleep as is_asleep
from .sleeping import request_wake as request_wake
from .sleeping import wake_deployment as wake_deployment

__all__ = [
    "BUSY_RESERVED",
    "BUSY_ROLLOUT",
    "asleep_deployments",
    "deployments_to_wake",
    "grant_sleep",
    "is_asleep",
    "wake_deployment",
]
