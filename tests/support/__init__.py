"""Helpers for every test: import them from here."""

from .nats import eventually as eventually
from .nats import running_nats_server as running_nats_server
from .repo import REPO as REPO

__all__ = ["REPO", "eventually", "running_nats_server"]
