"""What hub and sidecar share, grouped in rooms by concern and re-exported here.

- ``runtime.wire``: frames, codec, subjects, reason and outcome codes, size
  limits, ids, keys, the run-state classifier;
- ``runtime.transport``: the Transport seam, NATS behind it, subject grammar;
- ``runtime.actors``: the actor kernel;
- ``runtime.loops``: event loop, signals, wakeups, backoff, exception groups;
- ``runtime.sidecar_contract``: restore record, sources layout, containment,
  private state, the replay's job: what hub and sidecar agree on besides frames;
- ``runtime.sqlite``: SQLite as both stores use it;
- ``runtime.testing``: the in-memory bus and failpoints for tests.

Beside them, what every room uses: the exception tree (``_errors``), the
shared defaults (``_config``) and the failpoints (``_failpoints``).
"""

from ._config import BACKOFF_MAX_ENV as BACKOFF_MAX_ENV
from ._config import DEFAULT_HTTP as DEFAULT_HTTP
from ._config import DEFAULT_HTTP_PORT as DEFAULT_HTTP_PORT
from ._config import DEFAULT_HUB_URL as DEFAULT_HUB_URL
from ._config import DEFAULT_LOG_LEVEL as DEFAULT_LOG_LEVEL
from ._config import DEFAULT_MAIL_DOMAIN as DEFAULT_MAIL_DOMAIN
from ._config import DEFAULT_MAX_BODY as DEFAULT_MAX_BODY
from ._config import DEFAULT_NATS_PORT as DEFAULT_NATS_PORT
from ._config import DEFAULT_NATS_URL as DEFAULT_NATS_URL
from ._config import DEFAULT_REDELIVER_AFTER as DEFAULT_REDELIVER_AFTER
from ._config import DEFAULT_RUN_HISTORY as DEFAULT_RUN_HISTORY
from ._config import DEFAULT_SUBJECT_PREFIX as DEFAULT_SUBJECT_PREFIX
from ._config import HUB_URL_ENV as HUB_URL_ENV
from ._config import LOG_LEVEL_ENV as LOG_LEVEL_ENV
from ._config import LOOP_ENV as LOOP_ENV
from ._config import LOOPBACK as LOOPBACK
from ._config import NATS_URL_ENV as NATS_URL_ENV
from ._config import REDELIVER_AFTER_ENV as REDELIVER_AFTER_ENV
from ._config import RUN_HISTORY_ENV as RUN_HISTORY_ENV
from ._config import SQLITE_SYNCHRONOUS_ENV as SQLITE_SYNCHRONOUS_ENV
from ._config import HostPort as HostPort
from ._config import SidecarExit as SidecarExit
from ._config import parse_host_port as parse_host_port
from ._config import redact_url as redact_url
from ._errors import ActorError as ActorError
from ._errors import ActorStopped as ActorStopped
from ._errors import AskTimeout as AskTimeout
from ._errors import FailpointError as FailpointError
from ._errors import FailpointSpecError as FailpointSpecError
from ._errors import FrameDecodeError as FrameDecodeError
from ._errors import InvalidSources as InvalidSources
from ._errors import MailboxFull as MailboxFull
from ._errors import MailrunError as MailrunError
from ._errors import NoResponders as NoResponders
from ._errors import RecordDecodeError as RecordDecodeError
from ._errors import RequestTimeout as RequestTimeout
from ._errors import SignatureError as SignatureError
from ._errors import TransactionError as TransactionError
from ._errors import TransactionFailed as TransactionFailed
from ._errors import TransportClosed as TransportClosed
from ._errors import TransportError as TransportError
from ._failpoints import afailpoint as afailpoint
from ._failpoints import check_failpoints as check_failpoints
from ._failpoints import failpoint as failpoint
from ._process import ProcessSettings as ProcessSettings
from ._process import start_process as start_process
from .actors import Actor as Actor
from .actors import ActorRef as ActorRef
from .actors import RestartPolicy as RestartPolicy
from .actors import Supervisor as Supervisor
from .loops import ATTEMPT_LIMIT as ATTEMPT_LIMIT
from .loops import Backoff as Backoff
from .loops import Broadcast as Broadcast
from .loops import Flag as Flag
from .loops import Retry as Retry
from .loops import StackedContext as StackedContext
from .loops import Wakeup as Wakeup
from .loops import backoff as backoff
from .loops import backoff_max_from_env as backoff_max_from_env
from .loops import cancel_on_signals as cancel_on_signals
from .loops import loop_options as loop_options
from .loops import next_attempt as next_attempt
from .loops import running_loop as running_loop
from .loops import unwrap_group as unwrap_group
from .loops import unwrapping_groups as unwrapping_groups
from .sidecar_contract import DEFAULT_SIDECAR_MAX_FILES as DEFAULT_SIDECAR_MAX_FILES
from .sidecar_contract import DEFAULT_SIDECAR_MAX_MEMORY as DEFAULT_SIDECAR_MAX_MEMORY
from .sidecar_contract import HOME_LOCK_FILE as HOME_LOCK_FILE
from .sidecar_contract import REPLAY_ITEM_TIMEOUT as REPLAY_ITEM_TIMEOUT
from .sidecar_contract import SIDECAR_MAX_FILES_ENV as SIDECAR_MAX_FILES_ENV
from .sidecar_contract import SIDECAR_MAX_MEMORY_ENV as SIDECAR_MAX_MEMORY_ENV
from .sidecar_contract import SIDECAR_PASS_ENV as SIDECAR_PASS_ENV
from .sidecar_contract import HubKey as HubKey
from .sidecar_contract import Limits as Limits
from .sidecar_contract import Recorded as Recorded
from .sidecar_contract import RecordedEffect as RecordedEffect
from .sidecar_contract import RecordedEnd as RecordedEnd
from .sidecar_contract import ReplayDifference as ReplayDifference
from .sidecar_contract import ReplayFailureReport as ReplayFailureReport
from .sidecar_contract import ReplayItem as ReplayItem
from .sidecar_contract import ReplayJob as ReplayJob
from .sidecar_contract import ReplayReport as ReplayReport
from .sidecar_contract import RestoreRecord as RestoreRecord
from .sidecar_contract import Sources as Sources
from .sidecar_contract import check_layout as check_layout
from .sidecar_contract import decode_restore_record as decode_restore_record
from .sidecar_contract import make_private as make_private
from .sidecar_contract import private_umask as private_umask
from .sidecar_contract import read_restore_record as read_restore_record
from .sidecar_contract import record_path as record_path
from .sidecar_contract import remove_sidecar_state as remove_sidecar_state
from .sidecar_contract import sidecar_env as sidecar_env
from .sidecar_contract import write_atomic as write_atomic
from .sidecar_contract import write_restore_record as write_restore_record
from .transport import Message as Message
from .transport import Subscription as Subscription
from .transport import Transport as Transport
from .transport import open_nats as open_nats
from .wire import BATCH_FORMAT as BATCH_FORMAT
from .wire import BLOB_CHUNK_SIZE as BLOB_CHUNK_SIZE
from .wire import FORMAT_VERSION as FORMAT_VERSION
from .wire import INLINE_BODY_LIMIT as INLINE_BODY_LIMIT
from .wire import MAX_ERROR as MAX_ERROR
from .wire import MAX_EVENT as MAX_EVENT
from .wire import MAX_FRAME_BYTES as MAX_FRAME_BYTES
from .wire import MAX_INPUT as MAX_INPUT
from .wire import MAX_MAIL as MAX_MAIL
from .wire import MAX_PROMPT as MAX_PROMPT
from .wire import MAX_RESULT as MAX_RESULT
from .wire import MAX_STATE as MAX_STATE
from .wire import SIZE_LIMITS as SIZE_LIMITS
from .wire import SUPPORTED_FORMATS as SUPPORTED_FORMATS
from .wire import WIRE_MAX_PAYLOAD as WIRE_MAX_PAYLOAD
from .wire import Ack as Ack
from .wire import AckBatch as AckBatch
from .wire import AckResult as AckResult
from .wire import ApprovalRequested as ApprovalRequested
from .wire import BlobChunk as BlobChunk
from .wire import BlobGet as BlobGet
from .wire import Challenge as Challenge
from .wire import ChildRunStarted as ChildRunStarted
from .wire import Claim as Claim
from .wire import DeploymentStatus as DeploymentStatus
from .wire import DispatchOutcome as DispatchOutcome
from .wire import DispatchProcessed as DispatchProcessed
from .wire import EnvelopeQuarantined as EnvelopeQuarantined
from .wire import Event as Event
from .wire import EventsAck as EventsAck
from .wire import Fenced as Fenced
from .wire import Frame as Frame
from .wire import FrameDecoder as FrameDecoder
from .wire import Hello as Hello
from .wire import HubBoot as HubBoot
from .wire import IngressBatch as IngressBatch
from .wire import IngressMail as IngressMail
from .wire import IngressReceipt as IngressReceipt
from .wire import IngressReceipts as IngressReceipts
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
from .wire import SizeLimit as SizeLimit
from .wire import StateGet as StateGet
from .wire import Subjects as Subjects
from .wire import VersionLoaded as VersionLoaded
from .wire import Welcome as Welcome
from .wire import accepts_trigger as accepts_trigger
from .wire import anchor_is_live as anchor_is_live
from .wire import b64url as b64url
from .wire import clip_text as clip_text
from .wire import encode as encode
from .wire import encoded_size as encoded_size
from .wire import generate_keypair as generate_keypair
from .wire import hello_message as hello_message
from .wire import holds_items as holds_items
from .wire import is_id as is_id
from .wire import is_live as is_live
from .wire import is_terminal as is_terminal
from .wire import new_id as new_id
from .wire import public_key_of as public_key_of
from .wire import sign as sign
from .wire import unb64url as unb64url
from .wire import verify as verify

__all__ = [
    "ATTEMPT_LIMIT",
    "BACKOFF_MAX_ENV",
    "BATCH_FORMAT",
    "BLOB_CHUNK_SIZE",
    "DEFAULT_HTTP",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_HUB_URL",
    "DEFAULT_LOG_LEVEL",
    "DEFAULT_MAIL_DOMAIN",
    "DEFAULT_MAX_BODY",
    "DEFAULT_NATS_PORT",
    "DEFAULT_NATS_URL",
    "DEFAULT_REDELIVER_AFTER",
    "DEFAULT_RUN_HISTORY",
    "DEFAULT_SIDECAR_MAX_FILES",
    "DEFAULT_SIDECAR_MAX_MEMORY",
    "DEFAULT_SUBJECT_PREFIX",
    "FORMAT_VERSION",
    "HOME_LOCK_FILE",
    "HUB_URL_ENV",
    "INLINE_BODY_LIMIT",
    "LOG_LEVEL_ENV",
    "LOOPBACK",
    "LOOP_ENV",
    "MAX_ERROR",
    "MAX_EVENT",
    "MAX_FRAME_BYTES",
    "MAX_INPUT",
    "MAX_MAIL",
    "MAX_PROMPT",
    "MAX_RESULT",
    "MAX_STATE",
    "NATS_URL_ENV",
    "REDELIVER_AFTER_ENV",
    "REPLAY_ITEM_TIMEOUT",
    "RUN_HISTORY_ENV",
    "SIDECAR_MAX_FILES_ENV",
    "SIDECAR_MAX_MEMORY_ENV",
    "SIDECAR_PASS_ENV",
    "SIZE_LIMITS",
    "SQLITE_SYNCHRONOUS_ENV",
    "SUPPORTED_FORMATS",
    "WIRE_MAX_PAYLOAD",
    "Ack",
    "AckBatch",
    "AckResult",
    "Actor",
    "ActorError",
    "ActorRef",
    "ActorStopped",
    "ApprovalRequested",
    "AskTimeout",
    "Backoff",
    "BlobChunk",
    "BlobGet",
    "Broadcast",
    "Challenge",
    "ChildRunStarted",
    "Claim",
    "DeploymentStatus",
    "DispatchOutcome",
    "DispatchProcessed",
    "EnvelopeQuarantined",
    "Event",
    "EventsAck",
    "FailpointError",
    "FailpointSpecError",
    "Fenced",
    "Flag",
    "Frame",
    "FrameDecodeError",
    "FrameDecoder",
    "Hello",
    "HostPort",
    "HubBoot",
    "HubKey",
    "IngressBatch",
    "IngressMail",
    "IngressReceipt",
    "IngressReceipts",
    "InvalidSources",
    "Limits",
    "LoadVersion",
    "MailBatch",
    "MailInbound",
    "MailSent",
    "MailboxFull",
    "MailrunError",
    "Message",
    "MintChild",
    "Minted",
    "NoResponders",
    "Ping",
    "Pong",
    "ProcessSettings",
    "Reason",
    "RecordDecodeError",
    "Recorded",
    "RecordedEffect",
    "RecordedEnd",
    "Refused",
    "ReplayDifference",
    "ReplayFailureReport",
    "ReplayItem",
    "ReplayJob",
    "ReplayReport",
    "RequestTimeout",
    "RestartPolicy",
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
    "SizeLimit",
    "Sources",
    "StackedContext",
    "StateGet",
    "Subjects",
    "Subscription",
    "Supervisor",
    "TransactionError",
    "TransactionFailed",
    "Transport",
    "TransportClosed",
    "TransportError",
    "VersionLoaded",
    "Wakeup",
    "Welcome",
    "accepts_trigger",
    "afailpoint",
    "anchor_is_live",
    "b64url",
    "backoff",
    "backoff_max_from_env",
    "cancel_on_signals",
    "check_failpoints",
    "check_layout",
    "clip_text",
    "decode_restore_record",
    "encode",
    "encoded_size",
    "failpoint",
    "generate_keypair",
    "hello_message",
    "holds_items",
    "is_id",
    "is_live",
    "is_terminal",
    "loop_options",
    "make_private",
    "new_id",
    "next_attempt",
    "open_nats",
    "parse_host_port",
    "private_umask",
    "public_key_of",
    "read_restore_record",
    "record_path",
    "redact_url",
    "remove_sidecar_state",
    "running_loop",
    "sidecar_env",
    "sign",
    "start_process",
    "unb64url",
    "unwrap_group",
    "unwrapping_groups",
    "verify",
    "write_atomic",
    "write_restore_record",
]
