"""Every frame, as one union: what a decoder takes by default."""

from __future__ import annotations

from ._control import LoadVersion, Ping, PolicySet, Pong, SetPolicy, VersionLoaded
from ._delivery import Ack, AckBatch, BlobChunk, BlobGet, MailBatch, MailInbound
from ._ingress import IngressBatch, IngressReceipts
from ._requests import EventsAck, MintChild, Minted, RunEvents, RunStates, StateGet
from ._sessions import Asleep, Challenge, Fenced, Hello, HubBoot, Refused, Sleep, Welcome

Frame = (
    Hello
    | Challenge
    | Welcome
    | Refused
    | HubBoot
    | Fenced
    | Sleep
    | Asleep
    | MailInbound
    | MailBatch
    | Ping
    | Pong
    | LoadVersion
    | VersionLoaded
    | SetPolicy
    | PolicySet
    | Ack
    | AckBatch
    | BlobGet
    | BlobChunk
    | MintChild
    | Minted
    | StateGet
    | RunStates
    | RunEvents
    | EventsAck
    | IngressBatch
    | IngressReceipts
)
