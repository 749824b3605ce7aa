"""Deployments in the store: created and deleted, paused and unpaused, their
workflow versions and rollouts, their NATS identities, and the producers
that may send mail over the NATS ingress."""

from .identities import give_nats_identities as give_nats_identities
from .lifecycle import DEFAULT_ENTRYPOINT as DEFAULT_ENTRYPOINT
from .lifecycle import build_sources as build_sources
from .lifecycle import create_deployment as create_deployment
from .lifecycle import delete_deployment as delete_deployment
from .pausing import pause_deployment as pause_deployment
from .pausing import paused_deployments as paused_deployments
from .pausing import unpause_deployment as unpause_deployment
from .policy import PolicyChange as PolicyChange
from .policy import read_policy as read_policy
from .policy import set_policy as set_policy
from .producers import ProducerStatus as ProducerStatus
from .producers import ProducerView as ProducerView
from .producers import add_producers as add_producers
from .producers import get_producer as get_producer
from .producers import insert_producer as insert_producer
from .producers import is_active_producer as is_active_producer
from .producers import list_producers as list_producers
from .producers import remove_producer as remove_producer
from .producers import resolve_producer as resolve_producer
from .versions import Rollout as Rollout
from .versions import VersionStatus as VersionStatus
from .versions import VersionView as VersionView
from .versions import active_entrypoint as active_entrypoint
from .versions import add_version as add_version
from .versions import add_workflow_versions as add_workflow_versions
from .versions import finish_rollout as finish_rollout
from .versions import get_version as get_version
from .versions import list_versions as list_versions
from .versions import pending_rollouts as pending_rollouts
from .versions import request_rollout as request_rollout

__all__ = [
    "DEFAULT_ENTRYPOINT",
    "PolicyChange",
    "ProducerStatus",
    "ProducerView",
    "Rollout",
    "VersionStatus",
    "VersionView",
    "active_entrypoint",
    "add_version",
    "build_sources",
    "create_deployment",
    "delete_deployment",
    "finish_rollout",
    "get_producer",
    "get_version",
    "give_nats_identities",
    "insert_producer",
    "is_active_producer",
    "list_producers",
    "list_versions",
    "pause_deployment",
    "paused_deployments",
    "pending_rollouts",
    "read_policy",
    "remove_producer",
    "request_rollout",
    "resolve_producer",
    "set_policy",
    "unpause_deployment",
]
