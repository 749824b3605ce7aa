"""Helpers for every test (and bench/): import them from here.

Bigger harnesses have modules of their own: ``tests.support.wire`` (the hub's
wire side on an in-memory bus, a scripted sidecar) and ``tests.support.sidecar``
(a scripted hub, restore records, a running Sidecar).
"""

from hub.up import free_port as free_port

from .http import HubClient as HubClient
from .nats import NatsServerProcess as NatsServerProcess
from .nats import running_nats_server as running_nats_server
from .repo import REPO as REPO
from .waiting import wait_for as wait_for

__all__ = [
    "REPO",
    "HubClient",
    "NatsServerProcess",
    "free_port",
    "running_nats_server",
    "wait_for",
]
