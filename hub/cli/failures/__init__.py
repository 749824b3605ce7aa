"""The commands about handlers that fail past their retry budget:
``resume``, ``parked`` and ``retry`` (the policy's options are
``mailrun deploy``'s)."""

from .commands import COMMANDS as COMMANDS

__all__ = ["COMMANDS"]
