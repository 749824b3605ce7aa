"""What hub and sidecar processes agree on besides frames: the rules both
sides apply, kept here because hub and sidecar never import each other.

- the restore record a sidecar boots from (the hub writes it, or a join
  token carries it) and where it lies in a sidecar's state directory;
- the file layout of a deployment's sources (the hub checks it, the
  sidecar writes it);
- workflow containment: the environment and limits a sidecar process runs
  with (``mailrun up`` spawns it so, a sidecar started any other way
  re-executes itself so);
- private state: the umask of every process that writes state, and the
  removal of a deleted deployment's directory, never from under the sidecar
  holding its home lock;
- the fork server's frames, between ``mailrun up`` and the process it
  forks sidecars from;
- the replay's job and report, between the hub and its scratch process.
"""

from ._contain import DEFAULT_SIDECAR_MAX_FILES as DEFAULT_SIDECAR_MAX_FILES
from ._contain import DEFAULT_SIDECAR_MAX_MEMORY as DEFAULT_SIDECAR_MAX_MEMORY
from ._contain import SIDECAR_MAX_FILES_ENV as SIDECAR_MAX_FILES_ENV
from ._contain import SIDECAR_MAX_MEMORY_ENV as SIDECAR_MAX_MEMORY_ENV
from ._contain import SIDECAR_PASS_ENV as SIDECAR_PASS_ENV
from ._contain import Limits as Limits
from ._contain import sidecar_argv as sidecar_argv
from ._contain import sidecar_env as sidecar_env
from ._forking import FORK_MAX_FRAME as FORK_MAX_FRAME
from ._forking import FORK_SERVER_MODULE as FORK_SERVER_MODULE
from ._forking import FORK_TITLE_ROOM as FORK_TITLE_ROOM
from ._forking import Exited as Exited
from ._forking import Fork as Fork
from ._forking import Forked as Forked
from ._forking import ForkRefused as ForkRefused
from ._forking import decode_answer as decode_answer
from ._forking import decode_request as decode_request
from ._forking import encode_frame as encode_frame
from ._layout import check_layout as check_layout
from ._private import HOME_LOCK_FILE as HOME_LOCK_FILE
from ._private import make_private as make_private
from ._private import private_umask as private_umask
from ._private import remove_sidecar_state as remove_sidecar_state
from ._replay import REPLAY_ITEM_TIMEOUT as REPLAY_ITEM_TIMEOUT
from ._replay import Recorded as Recorded
from ._replay import RecordedEffect as RecordedEffect
from ._replay import RecordedEnd as RecordedEnd
from ._replay import ReplayDifference as ReplayDifference
from ._replay import ReplayFailureReport as ReplayFailureReport
from ._replay import ReplayItem as ReplayItem
from ._replay import ReplayJob as ReplayJob
from ._replay import ReplayReport as ReplayReport
from ._replay import effect_of as effect_of
from ._restore import HubKey as HubKey
from ._restore import RestoreRecord as RestoreRecord
from ._restore import Sources as Sources
from ._restore import decode_restore_record as decode_restore_record
from ._restore import read_restore_record as read_restore_record
from ._restore import record_path as record_path
from ._restore import write_atomic as write_atomic
from ._restore import write_restore_record as write_restore_record

__all__ = [
    "DEFAULT_SIDECAR_MAX_FILES",
    "DEFAULT_SIDECAR_MAX_MEMORY",
    "FORK_MAX_FRAME",
    "FORK_SERVER_MODULE",
    "FORK_TITLE_ROOM",
    "HOME_LOCK_FILE",
    "REPLAY_ITEM_TIMEOUT",
    "SIDECAR_MAX_FILES_ENV",
    "SIDECAR_MAX_MEMORY_ENV",
    "SIDECAR_PASS_ENV",
    "Exited",
    "Fork",
    "ForkRefused",
    "Forked",
    "HubKey",
    "Limits",
    "Recorded",
    "RecordedEffect",
    "RecordedEnd",
    "ReplayDifference",
    "ReplayFailureReport",
    "ReplayItem",
    "ReplayJob",
    "ReplayReport",
    "RestoreRecord",
    "Sources",
    "check_layout",
    "decode_answer",
    "decode_request",
    "decode_restore_record",
    "effect_of",
    "encode_frame",
    "make_private",
    "private_umask",
    "read_restore_record",
    "record_path",
    "remove_sidecar_state",
    "sidecar_argv",
    "sidecar_env",
    "write_atomic",
    "write_restore_record",
]
