"""What hub and sidecar share: ids, frames, codec, keys, the run-state
classifier, the wire vocabulary (reason and outcome codes), restore records,
the actor kernel, the transport seam, the idioms every loop uses (wakeups,
backoff and retries, signals, exception groups, contexts over an exit
stack), and what every process reads at its start (``start_process``)."""

from ._actor import Actor as Actor
from ._actor import ActorRef as ActorRef
from ._actor import RestartPolicy as RestartPolicy
from ._actor import Supervisor as Supervisor
from ._backoff import ATTEMPT_LIMIT as ATTEMPT_LIMIT
from ._backoff import Backoff as Backoff
from ._backoff import Retry as Retry
from ._backoff import backoff as backoff
from ._backoff import backoff_max_from_env as backoff_max_from_env
from ._backoff import next_attempt as next_attempt
from ._codec import FrameDecoder as FrameDecoder
from ._codec import Subjects as Subjects
from ._codec import encode as encode
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
from ._contain import DEFAULT_SIDECAR_MAX_FILES as DEFAULT_SIDECAR_MAX_FILES
from ._contain import DEFAULT_SIDECAR_MAX_MEMORY as DEFAULT_SIDECAR_MAX_MEMORY
from ._contain import SIDECAR_MAX_FILES_ENV as SIDECAR_MAX_FILES_ENV
from ._contain import SIDECAR_MAX_MEMORY_ENV as SIDECAR_MAX_MEMORY_ENV
from ._contain import SIDECAR_PASS_ENV as SIDECAR_PASS_ENV
from ._contain import Limits as Limits
from ._contain import sidecar_env as sidecar_env
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
from ._errors import TransactionSuspended as TransactionSuspended
from ._errors import TransportClosed as TransportClosed
from ._errors import TransportError as TransportError
from ._eventloop import loop_options as loop_options
from ._eventloop import running_loop as running_loop
from ._failpoints import afailpoint as afailpoint
from ._failpoints import check_failpoints as check_failpoints
from ._failpoints import failpoint as failpoint
from ._frames import BATCH_FORMAT as BATCH_FORMAT
from ._frames import BLOB_CHUNK_SIZE as BLOB_CHUNK_SIZE
from ._frames import FORMAT_VERSION as FORMAT_VERSION
from ._frames import INLINE_BODY_LIMIT as INLINE_BODY_LIMIT
from ._frames import SUPPORTED_FORMATS as SUPPORTED_FORMATS
from ._frames import Ack as Ack
from ._frames import AckBatch as AckBatch
from ._frames import ApprovalRequested as ApprovalRequested
from ._frames import BlobChunk as BlobChunk
from ._frames import BlobGet as BlobGet
from ._frames import Challenge as Challenge
from ._frames import ChildRunStarted as ChildRunStarted
from ._frames import Claim as Claim
from ._frames import DispatchProcessed as DispatchProcessed
from ._frames import EnvelopeQuarantined as EnvelopeQuarantined
from ._frames import Event as Event
from ._frames import EventsAck as EventsAck
from ._frames import Fenced as Fenced
from ._frames import Frame as Frame
from ._frames import Hello as Hello
from ._frames import HubBoot as HubBoot
from ._frames import IngressBatch as IngressBatch
from ._frames import IngressMail as IngressMail
from ._frames import IngressReceipt as IngressReceipt
from ._frames import IngressReceipts as IngressReceipts
from ._frames import LoadVersion as LoadVersion
from ._frames import MailBatch as MailBatch
from ._frames import MailInbound as MailInbound
from ._frames import MailSent as MailSent
from ._frames import MintChild as MintChild
from ._frames import Minted as Minted
from ._frames import Ping as Ping
from ._frames import Pong as Pong
from ._frames import Refused as Refused
from ._frames import RunCancelled as RunCancelled
from ._frames import RunCompleted as RunCompleted
from ._frames import RunEvents as RunEvents
from ._frames import RunFailed as RunFailed
from ._frames import RunSnapshot as RunSnapshot
from ._frames import RunStarted as RunStarted
from ._frames import RunStates as RunStates
from ._frames import StateGet as StateGet
from ._frames import VersionLoaded as VersionLoaded
from ._frames import Welcome as Welcome
from ._groups import unwrap_group as unwrap_group
from ._groups import unwrapping_groups as unwrapping_groups
from ._ids import is_id as is_id
from ._ids import new_id as new_id
from ._keys import b64url as b64url
from ._keys import generate_keypair as generate_keypair
from ._keys import hello_message as hello_message
from ._keys import public_key_of as public_key_of
from ._keys import sign as sign
from ._keys import unb64url as unb64url
from ._keys import verify as verify
from ._layout import check_layout as check_layout
from ._limits import MAX_ERROR as MAX_ERROR
from ._limits import MAX_EVENT as MAX_EVENT
from ._limits import MAX_FRAME_BYTES as MAX_FRAME_BYTES
from ._limits import MAX_INPUT as MAX_INPUT
from ._limits import MAX_MAIL as MAX_MAIL
from ._limits import MAX_PROMPT as MAX_PROMPT
from ._limits import MAX_RESULT as MAX_RESULT
from ._limits import MAX_STATE as MAX_STATE
from ._limits import SIZE_LIMITS as SIZE_LIMITS
from ._limits import WIRE_MAX_PAYLOAD as WIRE_MAX_PAYLOAD
from ._limits import SizeLimit as SizeLimit
from ._limits import clip_text as clip_text
from ._limits import encoded_size as encoded_size
from ._nats import open_nats as open_nats
from ._private import HOME_LOCK_FILE as HOME_LOCK_FILE
from ._private import make_private as make_private
from ._private import private_umask as private_umask
from ._private import remove_sidecar_state as remove_sidecar_state
from ._process import ProcessSettings as ProcessSettings
from ._process import start_process as start_process
from ._reasons import AckResult as AckResult
from ._reasons import DispatchOutcome as DispatchOutcome
from ._reasons import Reason as Reason
from ._replay import REPLAY_ITEM_TIMEOUT as REPLAY_ITEM_TIMEOUT
from ._replay import Recorded as Recorded
from ._replay import RecordedEffect as RecordedEffect
from ._replay import RecordedEnd as RecordedEnd
from ._replay import ReplayDifference as ReplayDifference
from ._replay import ReplayFailureReport as ReplayFailureReport
from ._replay import ReplayItem as ReplayItem
from ._replay import ReplayJob as ReplayJob
from ._replay import ReplayReport as ReplayReport
from ._restore import HubKey as HubKey
from ._restore import RestoreRecord as RestoreRecord
from ._restore import Sources as Sources
from ._restore import decode_restore_record as decode_restore_record
from ._restore import read_restore_record as read_restore_record
from ._restore import record_path as record_path
from ._restore import write_atomic as write_atomic
from ._restore import write_restore_record as write_restore_record
from ._runstate import DeploymentStatus as DeploymentStatus
from ._runstate import RunStatus as RunStatus
from ._runstate import accepts_trigger as accepts_trigger
from ._runstate import anchor_is_live as anchor_is_live
from ._runstate import holds_items as holds_items
from ._runstate import is_live as is_live
from ._runstate import is_terminal as is_terminal
from ._signals import cancel_on_signals as cancel_on_signals
from ._sqlite import JOURNAL_SIZE_LIMIT as JOURNAL_SIZE_LIMIT
from ._sqlite import configure_sqlite as configure_sqlite
from ._sqlite import connect_sqlite as connect_sqlite
from ._sqlite import release_free_pages as release_free_pages
from ._sqlite import sqlite_synchronous as sqlite_synchronous
from ._stacked import StackedContext as StackedContext
from ._transact import SLOW_TRANSACTION as SLOW_TRANSACTION
from ._transact import Body as Body
from ._transact import Connection as Connection
from ._transact import Cursor as Cursor
from ._transact import Params as Params
from ._transact import transact as transact
from ._transport import Message as Message
from ._transport import Subscription as Subscription
from ._transport import Transport as Transport
from ._wakeup import Broadcast as Broadcast
from ._wakeup import Flag as Flag
from ._wakeup import Wakeup as Wakeup

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
    "JOURNAL_SIZE_LIMIT",
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
    "SLOW_TRANSACTION",
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
    "Body",
    "Broadcast",
    "Challenge",
    "ChildRunStarted",
    "Claim",
    "Connection",
    "Cursor",
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
    "Params",
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
    "TransactionSuspended",
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
    "configure_sqlite",
    "connect_sqlite",
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
    "release_free_pages",
    "remove_sidecar_state",
    "running_loop",
    "sidecar_env",
    "sign",
    "sqlite_synchronous",
    "start_process",
    "transact",
    "unb64url",
    "unwrap_group",
    "unwrapping_groups",
    "verify",
    "write_atomic",
    "write_restore_record",
]
