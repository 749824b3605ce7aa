"""The ``mailrun`` command line: commands, tables, the demo and the
upgrade tooling."""

from .main import hub_cmd as hub_cmd
from .main import main as main

__all__ = ["hub_cmd", "main"]
