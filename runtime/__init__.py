"""What hub and sidecar share, grouped in rooms by concern; what both of them
use is re-exported here, what one side alone uses it imports from its room.

- ``runtime.wire``: frames, codec, subjects, reason and outcome codes, size
  limits, ids, keys, the run-state classifier;
- ``runtime.transport``: the Transport seam, NATS behind it, subject grammar;
- ``runtime.actors``: the actor kernel;
- ``runtime.loops``: event loop, signals, wakeups, backoff, exception groups;
- ``runtime.sidecar_contract``: restore record, sources layout, containment,
  private state, the replay's job: what hub and sidecar agree on besides frames;
- ``runtime.sqlite``: SQLite as both stores use it;
- ``runtime.testing``: the in-memory bus and failpoints for tests.

Beside them, public modules every room uses: the exception tree
(``runtime.errors``), the shared defaults and HOST:PORT rules
(``runtime.config``), the failpoints (``runtime.failpoints``), what every
process reads at its start (``runtime.process``), when a schedule fires
(``runtime.schedules``) and a package's names imported when first read
(``runtime.lazy``).
"""

from typing import TYPE_CHECKING

from . import tracing as tracing  # a module: its ``on`` is set where a process starts
from .config import FINAL_EXIT_NOTE as FINAL_EXIT_NOTE
from .config import NATS_URL_ENV as NATS_URL_ENV
from .config import SidecarExit as SidecarExit
from .errors import FrameDecodeError as FrameDecodeError
from .errors import InvalidSources as InvalidSources
from .errors import MailrunError as MailrunError
from .errors import RecordDecodeError as RecordDecodeError
from .errors import SignatureError as SignatureError
from .errors import TransportError as TransportError
from .failpoints import afailpoint as afailpoint
from .failpoints import check_failpoints as check_failpoints
from .lazy import lazy_names
from .loops import Backoff as Backoff
from .loops import Flag as Flag
from .loops import Retry as Retry
from .loops import Wakeup as Wakeup
from .loops import cancel_on_signals as cancel_on_signals
from .loops import running_loop as running_loop
from .loops import unwrap_group as unwrap_group
from .process import ProcessSettings as ProcessSettings
from .process import python_m as python_m
from .process import start_process as start_process
from .sidecar_contract import RecordedEffect as RecordedEffect
from .sidecar_contract import RecordedEnd as RecordedEnd
from .sidecar_contract import ReplayFailureReport as ReplayFailureReport
from .sidecar_contract import ReplayItem as ReplayItem
from .sidecar_contract import ReplayJob as ReplayJob
from .sidecar_contract import ReplayReport as ReplayReport
from .sidecar_contract import RestoreRecord as RestoreRecord
from .sidecar_contract import Sources as Sources
from .sidecar_contract import check_layout as check_layout
from .sidecar_contract import make_private as make_private
from .sidecar_contract import private_umask as private_umask
from .sidecar_contract import read_restore_record as read_restore_record
from .sidecar_contract import record_path as record_path
from .sidecar_contract import sidecar_env as sidecar_env
from .sidecar_contract import write_atomic as write_atomic
from .sidecar_contract import write_restore_record as write_restore_record
from .wire import MAX_FRAME_BYTES as MAX_FRAME_BYTES
from .wire import RESUME_KIND as RESUME_KIND
from .wire import WIRE_MAX_PAYLOAD as WIRE_MAX_PAYLOAD
from .wire import Ack as Ack
from .wire import AckBatch as AckBatch
from .wire import AckResult as AckResult
from .wire import ApprovalRequested as ApprovalRequested
from .wire import Asleep as Asleep
from .wire import BlobChunk as BlobChunk
from .wire import BlobGet as BlobGet
from .wire import Challenge as Challenge
from .wire import ChildRunStarted as ChildRunStarted
from .wire import Claim as Claim
from .wire import DispatchOutcome as DispatchOutcome
from .wire import DispatchProcessed as DispatchProcessed
from .wire import EnvelopeQuarantined as EnvelopeQuarantined
from .wire import Event as Event
from .wire import EventsAck as EventsAck
from .wire import Fenced as Fenced
from .wire import FrameDecoder as FrameDecoder
from .wire import Hello as Hello
from .wire import HubBoot as HubBoot
from .wire import LoadVersion as LoadVersion
from .wire import MailBatch as MailBatch
from .wire import MailInbound as MailInbound
from .wire import MailSent as MailSent
from .wire import MintChild as MintChild
from .wire import Minted as Minted
from .wire import Ping as Ping
from .wire import Pong as Pong
from .wire import Reason as Reason
from .wire import Refused as Refused
from .wire import RunCancelled as RunCancelled
from .wire import RunCompleted as RunCompleted
from .wire import RunEvents as RunEvents
from .wire import RunFailed as RunFailed
from .wire import RunSnapshot as RunSnapshot
from .wire import RunStarted as RunStarted
from .wire import RunStates as RunStates
from .wire import RunStatus as RunStatus
from .wire import Sleep as Sleep
from .wire import StateGet as StateGet
from .wire import Subjects as Subjects
from .wire import VersionLoaded as VersionLoaded
from .wire import Welcome as Welcome
from .wire import encode as encode
from .wire import hello_message as hello_message
from .wire import is_id as is_id
from .wire import is_live as is_live
from .wire import is_terminal as is_terminal
from .wire import new_id as new_id

if TYPE_CHECKING:
    from .transport import Message as Message
    from .transport import Subscription as Subscription
    from .transport import Transport as Transport
    from .transport import open_nats as open_nats

# The transport's names are imported when first read: it brings in the NATS
# client, which `mailrun up` and every CLI process would import for nothing
# (about 0.1-0.2 s of CPU each; docs/testing.md, "What the suite costs"). The
# TYPE_CHECKING imports above say the same to mypy (tests/hub/test_lazy_packages.py).
_LAZY = {
    "Message": ".transport",
    "Subscription": ".transport",
    "Transport": ".transport",
    "open_nats": ".transport",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__all__ = [
    "FINAL_EXIT_NOTE",
    "MAX_FRAME_BYTES",
    "NATS_URL_ENV",
    "RESUME_KIND",
    "WIRE_MAX_PAYLOAD",
    "Ack",
    "AckBatch",
    "AckResult",
    "ApprovalRequested",
    "Asleep",
    "Backoff",
    "BlobChunk",
    "BlobGet",
    "Challenge",
    "ChildRunStarted",
    "Claim",
    "DispatchOutcome",
    "DispatchProcessed",
    "EnvelopeQuarantined",
    "Event",
    "EventsAck",
    "Fenced",
    "Flag",
    "FrameDecodeError",
    "FrameDecoder",
    "Hello",
    "HubBoot",
    "InvalidSources",
    "LoadVersion",
    "MailBatch",
    "MailInbound",
    "MailSent",
    "MailrunError",
    "Message",
    "MintChild",
    "Minted",
    "Ping",
    "Pong",
    "ProcessSettings",
    "Reason",
    "RecordDecodeError",
    "RecordedEffect",
    "RecordedEnd",
    "Refused",
    "ReplayFailureReport",
    "ReplayItem",
    "ReplayJob",
    "ReplayReport",
    "RestoreRecord",
    "Retry",
    "RunCancelled",
    "RunCompleted",
    "RunEvents",
    "RunFailed",
    "RunSnapshot",
    "RunStarted",
    "RunStates",
    "RunStatus",
    "SidecarExit",
    "SignatureError",
    "Sleep",
    "Sources",
    "StateGet",
    "Subjects",
    "Subscription",
    "Transport",
    "TransportError",
    "VersionLoaded",
    "Wakeup",
    "Welcome",
    "afailpoint",
    "cancel_on_signals",
    "check_failpoints",
    "check_layout",
    "encode",
    "hello_message",
    "is_id",
    "is_live",
    "is_terminal",
    "make_private",
    "new_id",
    "open_nats",
    "private_umask",
    "python_m",
    "read_restore_record",
    "record_path",
    "running_loop",
    "sidecar_env",
    "start_process",
    "tracing",
    "unwrap_group",
    "write_atomic",
    "write_restore_record",
]
