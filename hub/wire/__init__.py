"""The hub's NATS side, in rooms by concern: sidecar sessions, ownership and
leases (``sessions``), what goes to each sidecar (``delivery``), what sidecars
report (``events``), the other requests the hub answers, the producers' mail
ingress among them (``requests``), and what it keeps of the past
(``retention``); ``service`` runs them all, and hands the rest of the hub
the ``Wire`` (``front``), which reports health and metrics (``reports``)
and has sidecars told they are fenced (``notices``)."""

from .delivery import DispatchConfig as DispatchConfig
from .delivery import HealthConfig as HealthConfig
from .front import Wire as Wire
from .requests import IngressConfig as IngressConfig
from .requests import run_ingress as run_ingress
from .retention import DeadLetters as DeadLetters
from .retention import RetentionConfig as RetentionConfig
from .service import WireConfig as WireConfig
from .service import run_wire as run_wire
from .sessions import LeaseKeeper as LeaseKeeper
from .sessions import hub_identity as hub_identity

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
