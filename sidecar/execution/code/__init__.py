"""The deployment's workflow code: its sources written once under the state
dir, its handlers loaded, and its versions (the restore record's first, a
rollout's from the hub) kept side by side while runs move between them."""

from ._versions import Versions as Versions
from ._workflow import Handler as Handler
from ._workflow import StateMigration as StateMigration
from ._workflow import load_workflow as load_workflow
from ._workflow import resolve_entrypoint as resolve_entrypoint
from ._workflow import state_migration as state_migration
from ._workflow import written_mark as written_mark

__all__ = [
    "Handler",
    "StateMigration",
    "Versions",
    "load_workflow",
    "resolve_entrypoint",
    "state_migration",
    "written_mark",
]
