"""What the hub sends each sidecar on its inbound subject: dispatches, in one
lane per deployment with a sliding window, sent again when never processed;
the pings that tell which sidecars answer; the delivered marks held for
the events' transaction; the version loads of rollouts;
changed failure policies."""

from .dispatcher import DispatchConfig as DispatchConfig
from .dispatcher import Dispatcher as Dispatcher
from .health import HealthConfig as HealthConfig
from .health import Prober as Prober
from .health import health_report as health_report
from .health import redelivery_metrics as redelivery_metrics
from .health import stuck_report as stuck_report
from .marks import Held as Held
from .marks import Marks as Marks
from .policies import POLICY_TIMEOUT as POLICY_TIMEOUT
from .policies import PolicyDriver as PolicyDriver
from .rollout import RolloutDriver as RolloutDriver

__all__ = [
    "POLICY_TIMEOUT",
    "DispatchConfig",
    "Dispatcher",
    "HealthConfig",
    "Held",
    "Marks",
    "PolicyDriver",
    "Prober",
    "RolloutDriver",
    "health_report",
    "redelivery_metrics",
    "stuck_report",
]
