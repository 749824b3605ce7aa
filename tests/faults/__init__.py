"""Fault injection for tests: a NATS fault proxy and a cluster of real processes."""

from .harness.cluster import Cluster as Cluster
from .harness.cluster import Proc as Proc
from .harness.cluster import SidecarNode as SidecarNode
from .harness.cluster import running_cluster as running_cluster
from .harness.proxy import Frame as Frame
from .harness.proxy import FrameParser as FrameParser
from .harness.proxy import NatsFaultProxy as NatsFaultProxy
from .harness.proxy import Rule as Rule
from .harness.proxy import subject_matches as subject_matches

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
