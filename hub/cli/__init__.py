"""The ``mailrun`` command line: commands, tables, the demo and the
upgrade tooling."""

from .main import main as main

__all__ = ["main"]
