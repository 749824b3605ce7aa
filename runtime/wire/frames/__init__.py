"""The wire contract: every frame on NATS is one of these msgspec Structs
(the run events a ``RunEvents`` frame carries are in ``runtime/wire/_events.py``),
a module for each family of frames; their format and its history in ``_format.py``.
"""

from ._control import LoadVersion as LoadVersion
from ._control import Ping as Ping
from ._control import PolicySet as PolicySet
from ._control import Pong as Pong
from ._control import SetPolicy as SetPolicy
from ._control import VersionLoaded as VersionLoaded
from ._delivery import APPROVAL_TIMEOUT as APPROVAL_TIMEOUT
from ._delivery import CANCEL_KIND as CANCEL_KIND
from ._delivery import RESUME_KIND as RESUME_KIND
from ._delivery import SCHEDULE_KIND as SCHEDULE_KIND
from ._delivery import TIMER_KIND as TIMER_KIND
from ._delivery import Ack as Ack
from ._delivery import AckBatch as AckBatch
from ._delivery import BlobChunk as BlobChunk
from ._delivery import BlobGet as BlobGet
from ._delivery import Claim as Claim
from ._delivery import MailBatch as MailBatch
from ._delivery import MailInbound as MailInbound
from ._delivery import ScheduleFired as ScheduleFired
from ._delivery import TimerFired as TimerFired
from ._format import BATCH_FORMAT as BATCH_FORMAT
from ._format import BLOB_CHUNK_SIZE as BLOB_CHUNK_SIZE
from ._format import FORMAT_VERSION as FORMAT_VERSION
from ._format import INLINE_BODY_LIMIT as INLINE_BODY_LIMIT
from ._format import SUPPORTED_FORMATS as SUPPORTED_FORMATS
from ._ingress import IngressBatch as IngressBatch
from ._ingress import IngressMail as IngressMail
from ._ingress import IngressReceipt as IngressReceipt
from ._ingress import IngressReceipts as IngressReceipts
from ._requests import EventsAck as EventsAck
from ._requests import MintChild as MintChild
from ._requests import Minted as Minted
from ._requests import RunEvents as RunEvents
from ._requests import RunSnapshot as RunSnapshot
from ._requests import RunStates as RunStates
from ._requests import StateGet as StateGet
from ._sessions import LEGACY_POLICY as LEGACY_POLICY
from ._sessions import Asleep as Asleep
from ._sessions import Challenge as Challenge
from ._sessions import FailurePolicy as FailurePolicy
from ._sessions import Fenced as Fenced
from ._sessions import Hello as Hello
from ._sessions import HubBoot as HubBoot
from ._sessions import Refused as Refused
from ._sessions import Sleep as Sleep
from ._sessions import Welcome as Welcome
from ._union import Frame as Frame

__all__ = [
    "APPROVAL_TIMEOUT",
    "BATCH_FORMAT",
    "BLOB_CHUNK_SIZE",
    "CANCEL_KIND",
    "FORMAT_VERSION",
    "INLINE_BODY_LIMIT",
    "LEGACY_POLICY",
    "RESUME_KIND",
    "SCHEDULE_KIND",
    "SUPPORTED_FORMATS",
    "TIMER_KIND",
    "Ack",
    "AckBatch",
    "Asleep",
    "BlobChunk",
    "BlobGet",
    "Challenge",
    "Claim",
    "EventsAck",
    "FailurePolicy",
    "Fenced",
    "Frame",
    "Hello",
    "HubBoot",
    "IngressBatch",
    "IngressMail",
    "IngressReceipt",
    "IngressReceipts",
    "LoadVersion",
    "MailBatch",
    "MailInbound",
    "MintChild",
    "Minted",
    "Ping",
    "PolicySet",
    "Pong",
    "Refused",
    "RunEvents",
    "RunSnapshot",
    "RunStates",
    "ScheduleFired",
    "SetPolicy",
    "Sleep",
    "StateGet",
    "TimerFired",
    "VersionLoaded",
    "Welcome",
]
