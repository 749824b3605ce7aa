"""The ``mailrun`` command line: the commands that run mailrun's processes,
work on a state dir or operate a running hub, their tables, the demo and the
upgrade tooling."""

from .main import main as main
from .processes import hub_cmd as hub_cmd

__all__ = ["hub_cmd", "main"]
