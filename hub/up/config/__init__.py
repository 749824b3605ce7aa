"""What ``mailrun up`` runs with and on: its settings (``UpSettings``) and
what it announces (``UpInfo``), the ports it chooses itself, and its host
(one ``up`` per state dir, the environment its children get, the hub's
listening sockets it holds)."""

from .host import child_env as child_env
from .host import hold_listeners as hold_listeners
from .host import port_is_free as port_is_free
from .host import state_lock as state_lock
from .ports import PORTS_ENV as PORTS_ENV
from .ports import embedded_nats_port as embedded_nats_port
from .ports import ephemeral_ports as ephemeral_ports
from .ports import free_port as free_port
from .ports import parse_ports as parse_ports
from .settings import DEFAULT_IDLE_STOP as DEFAULT_IDLE_STOP
from .settings import DEFAULT_MAX_AWAKE as DEFAULT_MAX_AWAKE
from .settings import DEFAULT_SIDECAR_JOIN_TIMEOUT as DEFAULT_SIDECAR_JOIN_TIMEOUT
from .settings import DEFAULT_SIDECAR_START as DEFAULT_SIDECAR_START
from .settings import SIDECAR_JOIN_TIMEOUT_ENV as SIDECAR_JOIN_TIMEOUT_ENV
from .settings import SIDECAR_START_ENV as SIDECAR_START_ENV
from .settings import UpInfo as UpInfo
from .settings import UpSettings as UpSettings
from .settings import hub_url as hub_url

__all__ = [
    "DEFAULT_IDLE_STOP",
    "DEFAULT_MAX_AWAKE",
    "DEFAULT_SIDECAR_JOIN_TIMEOUT",
    "DEFAULT_SIDECAR_START",
    "PORTS_ENV",
    "SIDECAR_JOIN_TIMEOUT_ENV",
    "SIDECAR_START_ENV",
    "UpInfo",
    "UpSettings",
    "child_env",
    "embedded_nats_port",
    "ephemeral_ports",
    "free_port",
    "hold_listeners",
    "hub_url",
    "parse_ports",
    "port_is_free",
    "state_lock",
]
