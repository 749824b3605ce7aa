"""The fault proxy between a process and nats-server (``NatsFaultProxy``,
its ``Rule``s) and the slice of the NATS protocol it parses to cut the
stream into frames (``FrameParser``)."""

from .natsproto import Frame as Frame
from .natsproto import FrameParser as FrameParser
from .natsproto import ProtocolError as ProtocolError
from .natsproto import subject_matches as subject_matches
from .proxy import NatsFaultProxy as NatsFaultProxy
from .proxy import Rule as Rule

__all__ = ["Frame", "FrameParser", "NatsFaultProxy", "ProtocolError", "Rule", "subject_matches"]
