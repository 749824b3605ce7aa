"""The processes ``mailrun up`` runs: each a :class:`Child`, spawned with a
death signal, watched, restarted with backoff when it dies, stopped in the
order ``up`` chooses; and the :class:`Handle` of its running process,
spawned by ``up`` or forked by the fork server."""

from .children import MISSED_START as MISSED_START
from .children import SPAWN_FAILED as SPAWN_FAILED
from .children import Backoff as Backoff
from .children import Child as Child
from .children import ChildSpec as ChildSpec
from .children import ExitHook as ExitHook
from .children import Slot as Slot
from .children import Start as Start
from .children import exec_start as exec_start
from .children import pdeathsig_preexec as pdeathsig_preexec
from .children import spawn as spawn
from .children import terminate as terminate
from .handles import ForkedHandle as ForkedHandle
from .handles import Handle as Handle
from .handles import PopenHandle as PopenHandle
from .handles import stop_handle as stop_handle
from .handles import wait_exit as wait_exit

__all__ = [
    "MISSED_START",
    "SPAWN_FAILED",
    "Backoff",
    "Child",
    "ChildSpec",
    "ExitHook",
    "ForkedHandle",
    "Handle",
    "PopenHandle",
    "Slot",
    "Start",
    "exec_start",
    "pdeathsig_preexec",
    "spawn",
    "stop_handle",
    "terminate",
    "wait_exit",
]
