"""The hub's store: schema, migrations, the one accept function, queries.

Everything that touches hub.db lives here; the other rooms go through
these names."""

from .accept import accept_triggers as accept_triggers
from .addresses import AddressStatus as AddressStatus
from .addresses import address_status as address_status
from .approvals import ApprovalView as ApprovalView
from .approvals import get_approval as get_approval
from .approvals import list_approvals as list_approvals
from .base import Store as Store
from .bulk import insert_rows as insert_rows
from .bulk import insert_statement as insert_statement
from .bulk import update_rows as update_rows
from .bulk import update_statement as update_statement
from .change_views import change_views as change_views
from .changes import DEFAULT_CHANGES_KEPT as DEFAULT_CHANGES_KEPT
from .changes import FEED_HOLD as FEED_HOLD
from .changes import Change as Change
from .changes import ChangeKind as ChangeKind
from .changes import feed_start as feed_start
from .changes import last_change_id as last_change_id
from .changes import read_changes as read_changes
from .changes import read_feed as read_feed
from .changes import trim_changes as trim_changes
from .db import DEFAULT_BUSY_TIMEOUT as DEFAULT_BUSY_TIMEOUT
from .db import SqliteStore as SqliteStore
from .db import pending_migrations as pending_migrations
from .db import read_version as read_version
from .deployments import DEFAULT_ENTRYPOINT as DEFAULT_ENTRYPOINT
from .deployments import Created as Created
from .deployments import build_sources as build_sources
from .deployments import create_deployment as create_deployment
from .deployments import delete_deployment as delete_deployment
from .group_commit import Acceptor as Acceptor
from .history import RunHistory as RunHistory
from .history import read_history as read_history
from .identities import give_nats_identities as give_nats_identities
from .leases import LeaseRound as LeaseRound
from .leases import check_lease as check_lease
from .leases import hold_role as hold_role
from .leases import release_all as release_all
from .leases import renew_and_take as renew_and_take
from .leases import share_health as share_health
from .migrations import LATEST as LATEST
from .migrations import OnStep as OnStep
from .migrations import migrations_after as migrations_after
from .opening import DATABASE_ENV as DATABASE_ENV
from .opening import is_database_url as is_database_url
from .opening import open_store as open_store
from .outbox import OutboundMail as OutboundMail
from .outbox import OutboundStatus as OutboundStatus
from .outbox import OutboundView as OutboundView
from .outbox import count_outbound as count_outbound
from .outbox import list_outbound as list_outbound
from .outbox import record_outbound as record_outbound
from .producers import NewProducer as NewProducer
from .producers import ProducerStatus as ProducerStatus
from .producers import ProducerView as ProducerView
from .producers import get_producer as get_producer
from .producers import insert_producer as insert_producer
from .producers import is_active_producer as is_active_producer
from .producers import list_producers as list_producers
from .producers import remove_producer as remove_producer
from .producers import resolve_producer as resolve_producer
from .queries import DeploymentView as DeploymentView
from .queries import DispatchView as DispatchView
from .queries import RunView as RunView
from .queries import count_by_status as count_by_status
from .queries import deployment_of_run as deployment_of_run
from .queries import get_deployment as get_deployment
from .queries import get_dispatch as get_dispatch
from .queries import get_run as get_run
from .queries import list_deployments as list_deployments
from .queries import list_dispatches as list_dispatches
from .queries import list_runs as list_runs
from .queries import resolve_deployment as resolve_deployment
from .reads import fetch_all as fetch_all
from .reads import fetch_one as fetch_one
from .reads import run_in as run_in
from .relaying import DueMail as DueMail
from .relaying import defer as defer
from .relaying import due_mail as due_mail
from .relaying import mark_failed as mark_failed
from .relaying import mark_retry as mark_retry
from .relaying import mark_sending as mark_sending
from .relaying import mark_sent as mark_sent
from .relaying import next_due as next_due
from .relaying import settle_at_boot as settle_at_boot
from .schema import QUARANTINE_SOURCE as QUARANTINE_SOURCE
from .schema import ApprovalStatus as ApprovalStatus
from .schema import DispatchStatus as DispatchStatus
from .sql import Tx as Tx
from .transfer import transfer as transfer
from .triggers import WITH_OTHERS as WITH_OTHERS
from .triggers import Accepted as Accepted
from .triggers import Outcome as Outcome
from .triggers import Receipt as Receipt
from .triggers import RefusedByRun as RefusedByRun
from .triggers import Rejected as Rejected
from .triggers import Trigger as Trigger
from .triggers import body_digest as body_digest
from .versions import Rollout as Rollout
from .versions import VersionStatus as VersionStatus
from .versions import VersionView as VersionView
from .versions import active_entrypoint as active_entrypoint
from .versions import add_version as add_version
from .versions import finish_rollout as finish_rollout
from .versions import get_version as get_version
from .versions import list_versions as list_versions
from .versions import pending_rollouts as pending_rollouts
from .versions import request_rollout as request_rollout

__all__ = [
    "DATABASE_ENV",
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_CHANGES_KEPT",
    "DEFAULT_ENTRYPOINT",
    "FEED_HOLD",
    "LATEST",
    "QUARANTINE_SOURCE",
    "WITH_OTHERS",
    "Accepted",
    "Acceptor",
    "AddressStatus",
    "ApprovalStatus",
    "ApprovalView",
    "Change",
    "ChangeKind",
    "Created",
    "DeploymentView",
    "DispatchStatus",
    "DispatchView",
    "DueMail",
    "LeaseRound",
    "NewProducer",
    "OnStep",
    "OutboundMail",
    "OutboundStatus",
    "OutboundView",
    "Outcome",
    "ProducerStatus",
    "ProducerView",
    "Receipt",
    "RefusedByRun",
    "Rejected",
    "Rollout",
    "RunHistory",
    "RunView",
    "SqliteStore",
    "Store",
    "Trigger",
    "Tx",
    "VersionStatus",
    "VersionView",
    "accept_triggers",
    "active_entrypoint",
    "add_version",
    "address_status",
    "body_digest",
    "build_sources",
    "change_views",
    "check_lease",
    "count_by_status",
    "count_outbound",
    "create_deployment",
    "defer",
    "delete_deployment",
    "deployment_of_run",
    "due_mail",
    "feed_start",
    "fetch_all",
    "fetch_one",
    "finish_rollout",
    "get_approval",
    "get_deployment",
    "get_dispatch",
    "get_producer",
    "get_run",
    "get_version",
    "give_nats_identities",
    "hold_role",
    "insert_producer",
    "insert_rows",
    "insert_statement",
    "is_active_producer",
    "is_database_url",
    "last_change_id",
    "list_approvals",
    "list_deployments",
    "list_dispatches",
    "list_outbound",
    "list_producers",
    "list_runs",
    "list_versions",
    "mark_failed",
    "mark_retry",
    "mark_sending",
    "mark_sent",
    "migrations_after",
    "next_due",
    "open_store",
    "pending_migrations",
    "pending_rollouts",
    "read_changes",
    "read_feed",
    "read_history",
    "read_version",
    "record_outbound",
    "release_all",
    "remove_producer",
    "renew_and_take",
    "request_rollout",
    "resolve_deployment",
    "resolve_producer",
    "run_in",
    "settle_at_boot",
    "share_health",
    "transfer",
    "trim_changes",
    "update_rows",
    "update_statement",
]
