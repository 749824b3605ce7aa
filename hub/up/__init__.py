"""``mailrun up``: the process supervisor, its children and the embedded
nats-server.

Each name is imported the first time it is read (``from hub.up import
run_up`` works as ever): the CLI reads the defaults of ``mailrun up``'s
options from here, and must not import the supervisor, the hub's client and
store with them (docs/testing.md, "What the suite costs")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.lazy import lazy_names

if TYPE_CHECKING:
    from .config import DEFAULT_IDLE_STOP as DEFAULT_IDLE_STOP
    from .config import DEFAULT_MAX_AWAKE as DEFAULT_MAX_AWAKE
    from .config import DEFAULT_SIDECAR_JOIN_TIMEOUT as DEFAULT_SIDECAR_JOIN_TIMEOUT
    from .config import DEFAULT_SIDECAR_START as DEFAULT_SIDECAR_START
    from .config import PORTS_ENV as PORTS_ENV
    from .config import SIDECAR_JOIN_TIMEOUT_ENV as SIDECAR_JOIN_TIMEOUT_ENV
    from .config import SIDECAR_START_ENV as SIDECAR_START_ENV
    from .config import UpInfo as UpInfo
    from .config import UpSettings as UpSettings
    from .config import free_port as free_port
    from .config import hub_url as hub_url
    from .config import parse_ports as parse_ports
    from .fleet import Fleet as Fleet
    from .nats import find_nats_server as find_nats_server
    from .processes import Backoff as Backoff
    from .processes import Child as Child
    from .processes import ChildSpec as ChildSpec
    from .processes import Slot as Slot
    from .supervisor import run_up as run_up

# Each name and the module it comes from; the TYPE_CHECKING imports above
# say the same to mypy (tests/hub/test_lazy_packages.py holds the two together).
_LAZY = {
    "Backoff": ".processes",
    "Child": ".processes",
    "ChildSpec": ".processes",
    "DEFAULT_IDLE_STOP": ".config",
    "DEFAULT_MAX_AWAKE": ".config",
    "DEFAULT_SIDECAR_JOIN_TIMEOUT": ".config",
    "DEFAULT_SIDECAR_START": ".config",
    "Fleet": ".fleet",
    "PORTS_ENV": ".config",
    "SIDECAR_JOIN_TIMEOUT_ENV": ".config",
    "SIDECAR_START_ENV": ".config",
    "Slot": ".processes",
    "UpInfo": ".config",
    "UpSettings": ".config",
    "find_nats_server": ".nats",
    "free_port": ".config",
    "hub_url": ".config",
    "parse_ports": ".config",
    "run_up": ".supervisor",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__all__ = [
    "DEFAULT_IDLE_STOP",
    "DEFAULT_MAX_AWAKE",
    "DEFAULT_SIDECAR_JOIN_TIMEOUT",
    "DEFAULT_SIDECAR_START",
    "PORTS_ENV",
    "SIDECAR_JOIN_TIMEOUT_ENV",
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
