"""``mailrun up``: the process supervisor, its children and the embedded
nats-server."""

from .children import Backoff as Backoff
from .children import Child as Child
from .children import ChildSpec as ChildSpec
from .children import Slot as Slot
from .fleet import Fleet as Fleet
from .nats import find_nats_server as find_nats_server
from .ports import PORTS_ENV as PORTS_ENV
from .ports import free_port as free_port
from .ports import parse_ports as parse_ports
from .settings import DEFAULT_IDLE_STOP as DEFAULT_IDLE_STOP
from .settings import DEFAULT_MAX_AWAKE as DEFAULT_MAX_AWAKE
from .settings import DEFAULT_SIDECAR_START as DEFAULT_SIDECAR_START
from .settings import SIDECAR_START_ENV as SIDECAR_START_ENV
from .settings import UpInfo as UpInfo
from .settings import UpSettings as UpSettings
from .settings import hub_url as hub_url
from .supervisor import run_up as run_up

__all__ = [
    "DEFAULT_IDLE_STOP",
    "DEFAULT_MAX_AWAKE",
    "DEFAULT_SIDECAR_START",
    "PORTS_ENV",
    "SIDECAR_START_ENV",
    "Backoff",
    "Child",
    "ChildSpec",
    "Fleet",
    "Slot",
    "UpInfo",
    "UpSettings",
    "find_nats_server",
    "free_port",
    "hub_url",
    "parse_ports",
    "run_up",
]
