"""Fault injection for tests: a NATS fault proxy and a cluster of real processes."""

from .cluster import Cluster as Cluster
from .cluster import Proc as Proc
from .cluster import SidecarNode as SidecarNode
from .cluster import running_cluster as running_cluster
from .natsproto import Frame as Frame
from .natsproto import FrameParser as FrameParser
from .natsproto import subject_matches as subject_matches
from .proxy import NatsFaultProxy as NatsFaultProxy
from .proxy import Rule as Rule

__all__ = [
    "Cluster",
    "Frame",
    "FrameParser",
    "NatsFaultProxy",
    "Proc",
    "Rule",
    "SidecarNode",
    "running_cluster",
    "subject_matches",
]
