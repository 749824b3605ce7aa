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
    from .settings import DEFAULT_SIDECAR_JOIN_TIMEOUT as DEFAULT_SIDECAR_JOIN_TIMEOUT
    from .settings import DEFAULT_SIDECAR_START as DEFAULT_SIDECAR_START
    from .settings import SIDECAR_JOIN_TIMEOUT_ENV as SIDECAR_JOIN_TIMEOUT_ENV
    from .settings import SIDECAR_START_ENV as SIDECAR_START_ENV
    from .settings import UpInfo as UpInfo
    from .settings import UpSettings as UpSettings
    from .settings import hub_url as hub_url
    from .supervisor import run_up as run_up

# Each name and the module it comes from; the TYPE_CHECKING imports above
# say the same to mypy (tests/hub/test_lazy_packages.py holds the two together).
_LAZY = {
    "Backoff": ".children",
    "Child": ".children",
    "ChildSpec": ".children",
    "DEFAULT_IDLE_STOP": ".settings",
    "DEFAULT_MAX_AWAKE": ".settings",
    "DEFAULT_SIDECAR_JOIN_TIMEOUT": ".settings",
    "DEFAULT_SIDECAR_START": ".settings",
    "Fleet": ".fleet",
    "PORTS_ENV": ".ports",
    "SIDECAR_JOIN_TIMEOUT_ENV": ".settings",
    "SIDECAR_START_ENV": ".settings",
    "Slot": ".children",
    "UpInfo": ".settings",
    "UpSettings": ".settings",
    "find_nats_server": ".nats",
    "free_port": ".ports",
    "hub_url": ".settings",
    "parse_ports": ".ports",
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
