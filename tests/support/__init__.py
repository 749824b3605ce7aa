"""Helpers for every test (and bench/): import them from here.

Bigger harnesses have modules of their own: ``tests.support.harnesses.wire`` (the hub's
wire side on an in-memory bus, a scripted sidecar) and ``tests.support.harnesses.sidecar``
(a scripted hub, restore records, a running Sidecar).

Each name is imported when it is first asked for (PEP 562), so a test that
uses none of the hub's helpers imports no hub code to be collected.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .http import HubClient as HubClient
    from .http import admit as admit
    from .launch.ports import free_port as free_port
    from .launch.processes import command_words as command_words
    from .launch.processes import descendants as descendants
    from .repo import REPO as REPO
    from .servers.nats import NatsServerProcess as NatsServerProcess
    from .servers.nats import running_nats_server as running_nats_server
    from .waiting import wait_for as wait_for

__all__ = [
    "REPO",
    "HubClient",
    "NatsServerProcess",
    "admit",
    "command_words",
    "descendants",
    "free_port",
    "running_nats_server",
    "wait_for",
]

_HOMES = {
    "REPO": ".repo",
    "HubClient": ".http",
    "NatsServerProcess": ".servers.nats",
    "admit": ".http",
    "command_words": ".launch.processes",
    "descendants": ".launch.processes",
    "free_port": ".launch.ports",
    "running_nats_server": ".servers.nats",
    "wait_for": ".waiting",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value  # asked once
    return value
