"""The wire contract hub and sidecar speak over NATS: frames, their codec and
subjects, the codes they carry, their size limits, ids, deployment keys and
the hello's signature, and the one run-state classifier.

Nothing here touches a socket: the transport carries the bytes
(``runtime.transport``), this room says what they mean.
"""

from ._codec import FrameDecoder as FrameDecoder
from ._codec import Subjects as Subjects
from ._codec import encode as encode
from ._events import ApprovalRequested as ApprovalRequested
from ._events import ChildRunStarted as ChildRunStarted
from ._events import DispatchProcessed as DispatchProcessed
from ._events import EnvelopeQuarantined as EnvelopeQuarantined
from ._events import Event as Event
from ._events import MailSent as MailSent
from ._events import RunCancelled as RunCancelled
from ._events import RunCompleted as RunCompleted
from ._events import RunFailed as RunFailed
from ._events import RunStarted as RunStarted
from ._events import RunSuspended as RunSuspended
from ._events import StepRecorded as StepRecorded
from ._events import TimerCancelled as TimerCancelled
from ._events import TimerSet as TimerSet
from ._ids import is_id as is_id
from ._ids import new_id as new_id
from ._keys import b64url as b64url
from ._keys import generate_keypair as generate_keypair
from ._keys import hello_message as hello_message
from ._keys import public_key_of as public_key_of
from ._keys import sign as sign
from ._keys import unb64url as unb64url
from ._keys import verify as verify
from ._limits import MAX_ERROR as MAX_ERROR
from ._limits import MAX_EVENT as MAX_EVENT
from ._limits import MAX_FRAME_BYTES as MAX_FRAME_BYTES
from ._limits import MAX_INPUT as MAX_INPUT
from ._limits import MAX_MAIL as MAX_MAIL
from ._limits import MAX_PROMPT as MAX_PROMPT
from ._limits import MAX_RESULT as MAX_RESULT
from ._limits import MAX_STATE as MAX_STATE
from ._limits import MAX_STEP_RESULT as MAX_STEP_RESULT
from ._limits import MAX_TIMER_PAYLOAD as MAX_TIMER_PAYLOAD
from ._limits import SIZE_LIMITS as SIZE_LIMITS
from ._limits import WIRE_MAX_PAYLOAD as WIRE_MAX_PAYLOAD
from ._limits import SizeLimit as SizeLimit
from ._limits import clip_text as clip_text
from ._limits import encoded_size as encoded_size
from ._mail import BOUNCE_KIND as BOUNCE_KIND
from ._mail import REPLIES_TO_ENDED as REPLIES_TO_ENDED
from ._mail import ROUTED_BY_CATCH_ALL as ROUTED_BY_CATCH_ALL
from ._mail import ROUTED_BY_HEADERS as ROUTED_BY_HEADERS
from ._mail import ROUTED_BY_REPLY_ADDRESS as ROUTED_BY_REPLY_ADDRESS
from ._mail import VERDICTS as VERDICTS
from ._mail import Attachment as Attachment
from ._mail import AuthVerdict as AuthVerdict
from ._mail import BounceReport as BounceReport
from ._mail import MailAuth as MailAuth
from ._mail import MailContext as MailContext
from ._reasons import AckResult as AckResult
from ._reasons import DispatchOutcome as DispatchOutcome
from ._reasons import OnFailure as OnFailure
from ._reasons import Reason as Reason
from ._runstate import DeploymentStatus as DeploymentStatus
from ._runstate import RunStatus as RunStatus
from ._runstate import accepts_trigger as accepts_trigger
from ._runstate import anchor_is_live as anchor_is_live
from ._runstate import holds_items as holds_items
from ._runstate import is_live as is_live
from ._runstate import is_terminal as is_terminal
from .frames import APPROVAL_TIMEOUT as APPROVAL_TIMEOUT
from .frames import BATCH_FORMAT as BATCH_FORMAT
from .frames import BLOB_CHUNK_SIZE as BLOB_CHUNK_SIZE
from .frames import CANCEL_KIND as CANCEL_KIND
from .frames import FORMAT_VERSION as FORMAT_VERSION
from .frames import INLINE_BODY_LIMIT as INLINE_BODY_LIMIT
from .frames import LEGACY_POLICY as LEGACY_POLICY
from .frames import RESUME_KIND as RESUME_KIND
from .frames import SCHEDULE_KIND as SCHEDULE_KIND
from .frames import SUPPORTED_FORMATS as SUPPORTED_FORMATS
from .frames import TIMER_KIND as TIMER_KIND
from .frames import Ack as Ack
from .frames import AckBatch as AckBatch
from .frames import Asleep as Asleep
from .frames import BlobChunk as BlobChunk
from .frames import BlobGet as BlobGet
from .frames import Challenge as Challenge
from .frames import Claim as Claim
from .frames import EventsAck as EventsAck
from .frames import FailurePolicy as FailurePolicy
from .frames import Fenced as Fenced
from .frames import Frame as Frame
from .frames import Hello as Hello
from .frames import HubBoot as HubBoot
from .frames import IngressBatch as IngressBatch
from .frames import IngressMail as IngressMail
from .frames import IngressReceipt as IngressReceipt
from .frames import IngressReceipts as IngressReceipts
from .frames import LoadVersion as LoadVersion
from .frames import MailBatch as MailBatch
from .frames import MailInbound as MailInbound
from .frames import MintChild as MintChild
from .frames import Minted as Minted
from .frames import Ping as Ping
from .frames import PolicySet as PolicySet
from .frames import Pong as Pong
from .frames import Refused as Refused
from .frames import RunEvents as RunEvents
from .frames import RunSnapshot as RunSnapshot
from .frames import RunStates as RunStates
from .frames import ScheduleFired as ScheduleFired
from .frames import SetPolicy as SetPolicy
from .frames import Sleep as Sleep
from .frames import StateGet as StateGet
from .frames import TimerFired as TimerFired
from .frames import VersionLoaded as VersionLoaded
from .frames import Welcome as Welcome

__all__ = [
    "APPROVAL_TIMEOUT",
    "BATCH_FORMAT",
    "BLOB_CHUNK_SIZE",
    "BOUNCE_KIND",
    "CANCEL_KIND",
    "FORMAT_VERSION",
    "INLINE_BODY_LIMIT",
    "LEGACY_POLICY",
    "MAX_ERROR",
    "MAX_EVENT",
    "MAX_FRAME_BYTES",
    "MAX_INPUT",
    "MAX_MAIL",
    "MAX_PROMPT",
    "MAX_RESULT",
    "MAX_STATE",
    "MAX_STEP_RESULT",
    "MAX_TIMER_PAYLOAD",
    "REPLIES_TO_ENDED",
    "RESUME_KIND",
    "ROUTED_BY_CATCH_ALL",
    "ROUTED_BY_HEADERS",
    "ROUTED_BY_REPLY_ADDRESS",
    "SCHEDULE_KIND",
    "SIZE_LIMITS",
    "SUPPORTED_FORMATS",
    "TIMER_KIND",
    "VERDICTS",
    "WIRE_MAX_PAYLOAD",
    "Ack",
    "AckBatch",
    "AckResult",
    "ApprovalRequested",
    "Asleep",
    "Attachment",
    "AuthVerdict",
    "BlobChunk",
    "BlobGet",
    "BounceReport",
    "Challenge",
    "ChildRunStarted",
    "Claim",
    "DeploymentStatus",
    "DispatchOutcome",
    "DispatchProcessed",
    "EnvelopeQuarantined",
    "Event",
    "EventsAck",
    "FailurePolicy",
    "Fenced",
    "Frame",
    "FrameDecoder",
    "Hello",
    "HubBoot",
    "IngressBatch",
    "IngressMail",
    "IngressReceipt",
    "IngressReceipts",
    "LoadVersion",
    "MailAuth",
    "MailBatch",
    "MailContext",
    "MailInbound",
    "MailSent",
    "MintChild",
    "Minted",
    "OnFailure",
    "Ping",
    "PolicySet",
    "Pong",
    "Reason",
    "Refused",
    "RunCancelled",
    "RunCompleted",
    "RunEvents",
    "RunFailed",
    "RunSnapshot",
    "RunStarted",
    "RunStates",
    "RunStatus",
    "RunSuspended",
    "ScheduleFired",
    "SetPolicy",
    "SizeLimit",
    "Sleep",
    "StateGet",
    "StepRecorded",
    "Subjects",
    "TimerCancelled",
    "TimerFired",
    "TimerSet",
    "VersionLoaded",
    "Welcome",
    "accepts_trigger",
    "anchor_is_live",
    "b64url",
    "clip_text",
    "encode",
    "encoded_size",
    "generate_keypair",
    "hello_message",
    "holds_items",
    "is_id",
    "is_live",
    "is_terminal",
    "new_id",
    "public_key_of",
    "sign",
    "unb64url",
    "verify",
]
