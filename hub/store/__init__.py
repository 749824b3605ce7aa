"""The hub's store: everything that touches the hub's database, in rooms by
concern, and the names the other rooms of the hub use, re-exported here.

- ``accepting``: triggers read-or-minted into dispatches, in groups;
- ``delivery``: dispatches sent and settled, run events applied, redelivery,
  quarantine, dead letters, trimming, blobs;
- ``sessions``: fences, leases, ownership, minting, a state dir's files;
- ``deployments``: deployments, their versions, identities, producers;
- ``views``: the read models the HTTP API and ``GET /events`` answer with;
- ``feed``: the change feed, recorded by triggers, read and trimmed;
- ``outbound``: outgoing mail and the relay's writes;
- ``mail``: a deployment's mail settings (who may write, its domain's
  catch-all), the hub's secrets, the mail runs sent, migration 20;
- ``clock``: time: the runs' timers and the deployments' schedules;
- ``sleep``: scale to zero: the sleep row a granted Sleep writes and a
  Welcome deletes, the wakes requested, the asleep deployments with work;
- ``schema`` and ``migrations``: the schema, and the ordered steps that
  build it on either database (and move a SQLite one to PostgreSQL);
- ``sql``: statements declared once per database, and ``Tx``;
- ``batching``: the one loop under every group commit (``Batches``);
- ``sqlite`` and ``pg``: the two stores behind ``Store`` (``base.py``),
  one of which ``open_store`` (``opening.py``) opens.

Everything else in the hub goes through these names."""

from .accepting import WITH_OTHERS as WITH_OTHERS
from .accepting import Accepted as Accepted
from .accepting import AddressStatus as AddressStatus
from .accepting import Outcome as Outcome
from .accepting import Receipt as Receipt
from .accepting import RefusedByRun as RefusedByRun
from .accepting import Rejected as Rejected
from .accepting import Trigger as Trigger
from .accepting import accept_alone as accept_alone
from .accepting import accept_groups as accept_groups
from .accepting import accept_triggers as accept_triggers
from .accepting import address_status as address_status
from .accepting import body_digest as body_digest
from .accepting import conflict_outcome as conflict_outcome
from .accepting import decision_trigger as decision_trigger
from .base import Store as Store
from .batching import Batches as Batches
from .batching import Pending as Pending
from .clock import APPROVAL_EXPIRY as APPROVAL_EXPIRY
from .clock import DueTimer as DueTimer
from .clock import Fire as Fire
from .clock import PendingTimer as PendingTimer
from .clock import ScheduleView as ScheduleView
from .clock import add_schedule as add_schedule
from .clock import cancel_timer as cancel_timer
from .clock import claim_timers as claim_timers
from .clock import count_timers as count_timers
from .clock import due_schedules as due_schedules
from .clock import due_timers as due_timers
from .clock import earliest_schedule_due as earliest_schedule_due
from .clock import earliest_timer_due as earliest_timer_due
from .clock import fire_message_id as fire_message_id
from .clock import fire_schedule as fire_schedule
from .clock import list_schedules as list_schedules
from .clock import remove_schedule as remove_schedule
from .clock import run_timers as run_timers
from .clock import set_timer as set_timer
from .delivery import OPEN_DISPATCH as OPEN_DISPATCH
from .delivery import SHARED_GRACE as SHARED_GRACE
from .delivery import AppliedRun as AppliedRun
from .delivery import Collected as Collected
from .delivery import DeadLetter as DeadLetter
from .delivery import DispatchToSettle as DispatchToSettle
from .delivery import EventRun as EventRun
from .delivery import NewRunEvent as NewRunEvent
from .delivery import Overdue as Overdue
from .delivery import ProcessedRows as ProcessedRows
from .delivery import QuarantinedDispatch as QuarantinedDispatch
from .delivery import ReservedCount as ReservedCount
from .delivery import ReservedDispatch as ReservedDispatch
from .delivery import RunMoved as RunMoved
from .delivery import RunPosition as RunPosition
from .delivery import SettledDispatch as SettledDispatch
from .delivery import StatePage as StatePage
from .delivery import ask_approval as ask_approval
from .delivery import blob_named as blob_named
from .delivery import cancel_quarantined as cancel_quarantined
from .delivery import collect_blobs as collect_blobs
from .delivery import count_quarantined as count_quarantined
from .delivery import count_reserved as count_reserved
from .delivery import deployment_address as deployment_address
from .delivery import event_run as event_run
from .delivery import find_overdue as find_overdue
from .delivery import finish_run as finish_run
from .delivery import floor_seq as floor_seq
from .delivery import keep_dead_letter as keep_dead_letter
from .delivery import load_reserved as load_reserved
from .delivery import mark_delivered as mark_delivered
from .delivery import name_child_entrypoint as name_child_entrypoint
from .delivery import put_back as put_back
from .delivery import quarantined_dispatch as quarantined_dispatch
from .delivery import read_processed as read_processed
from .delivery import read_state_page as read_state_page
from .delivery import record_answers as record_answers
from .delivery import record_event as record_event
from .delivery import start_run as start_run
from .delivery import still_open as still_open
from .delivery import suspend_run as suspend_run
from .delivery import trim_history as trim_history
from .delivery import write_processed as write_processed
from .deployments import DEFAULT_ENTRYPOINT as DEFAULT_ENTRYPOINT
from .deployments import Created as Created
from .deployments import NewProducer as NewProducer
from .deployments import PolicyChange as PolicyChange
from .deployments import ProducerStatus as ProducerStatus
from .deployments import ProducerView as ProducerView
from .deployments import Rollout as Rollout
from .deployments import VersionStatus as VersionStatus
from .deployments import VersionView as VersionView
from .deployments import active_entrypoint as active_entrypoint
from .deployments import add_version as add_version
from .deployments import build_sources as build_sources
from .deployments import check_policy as check_policy
from .deployments import create_deployment as create_deployment
from .deployments import delete_deployment as delete_deployment
from .deployments import finish_rollout as finish_rollout
from .deployments import get_producer as get_producer
from .deployments import get_version as get_version
from .deployments import give_nats_identities as give_nats_identities
from .deployments import insert_producer as insert_producer
from .deployments import is_active_producer as is_active_producer
from .deployments import list_producers as list_producers
from .deployments import list_versions as list_versions
from .deployments import pause_deployment as pause_deployment
from .deployments import paused_deployments as paused_deployments
from .deployments import pending_rollouts as pending_rollouts
from .deployments import read_policy as read_policy
from .deployments import remove_producer as remove_producer
from .deployments import request_rollout as request_rollout
from .deployments import resolve_producer as resolve_producer
from .deployments import set_policy as set_policy
from .deployments import unpause_deployment as unpause_deployment
from .failures import RetriedDispatch as RetriedDispatch
from .failures import cancel_run as cancel_run
from .failures import count_failures as count_failures
from .failures import list_parked as list_parked
from .failures import resume_if_outdated as resume_if_outdated
from .failures import resume_run as resume_run
from .failures import resume_suspended as resume_suspended
from .failures import retry_dispatch as retry_dispatch
from .feed import DEFAULT_CHANGES_KEPT as DEFAULT_CHANGES_KEPT
from .feed import FEED_HOLD as FEED_HOLD
from .feed import Change as Change
from .feed import ChangeKind as ChangeKind
from .feed import feed_start as feed_start
from .feed import last_change_id as last_change_id
from .feed import read_changes as read_changes
from .feed import read_feed as read_feed
from .feed import trim_changes as trim_changes
from .mail import REPLY_KEY as REPLY_KEY
from .mail import MailChange as MailChange
from .mail import MailSettings as MailSettings
from .mail import hub_secret as hub_secret
from .mail import sender_refusal as sender_refusal
from .mail import set_mail_settings as set_mail_settings
from .mail import settings_at as settings_at
from .migrations import LATEST as LATEST
from .migrations import OnStep as OnStep
from .migrations import migrations_after as migrations_after
from .migrations import transfer as transfer
from .opening import DATABASE_ENV as DATABASE_ENV
from .opening import is_database_url as is_database_url
from .opening import open_store as open_store
from .outbound import SOURCE_DSN as SOURCE_DSN
from .outbound import SOURCE_RELAY as SOURCE_RELAY
from .outbound import Bounced as Bounced
from .outbound import DueMail as DueMail
from .outbound import OutboundMail as OutboundMail
from .outbound import OutboundSpec as OutboundSpec
from .outbound import OutboundStatus as OutboundStatus
from .outbound import OutboundView as OutboundView
from .outbound import count_outbound as count_outbound
from .outbound import decode_spec as decode_spec
from .outbound import defer as defer
from .outbound import due_mail as due_mail
from .outbound import list_outbound as list_outbound
from .outbound import mark_bounced as mark_bounced
from .outbound import mark_failed as mark_failed
from .outbound import mark_retry as mark_retry
from .outbound import mark_sending as mark_sending
from .outbound import mark_sent as mark_sent
from .outbound import next_due as next_due
from .outbound import one_mailbox as one_mailbox
from .outbound import record_outbound as record_outbound
from .outbound import settle_at_boot as settle_at_boot
from .schema import QUARANTINE_SOURCE as QUARANTINE_SOURCE
from .schema import ApprovalStatus as ApprovalStatus
from .schema import DispatchStatus as DispatchStatus
from .sessions import Fence as Fence
from .sessions import InboxFormat as InboxFormat
from .sessions import LeaseRound as LeaseRound
from .sessions import LeaseToken as LeaseToken
from .sessions import MintParent as MintParent
from .sessions import NatsUser as NatsUser
from .sessions import OwnerRow as OwnerRow
from .sessions import active_producer_users as active_producer_users
from .sessions import check_fence as check_fence
from .sessions import commit_claim as commit_claim
from .sessions import hold_role as hold_role
from .sessions import inbox_format as inbox_format
from .sessions import live_deployment_users as live_deployment_users
from .sessions import mint_child as mint_child
from .sessions import postgres_schema_version as postgres_schema_version
from .sessions import read_owner as read_owner
from .sessions import read_state_file as read_state_file
from .sessions import release_all as release_all
from .sessions import renew_and_take as renew_and_take
from .sessions import schema_version as schema_version
from .sessions import share_health as share_health
from .sleep import BUSY_RESERVED as BUSY_RESERVED
from .sleep import BUSY_ROLLOUT as BUSY_ROLLOUT
from .sleep import asleep_deployments as asleep_deployments
from .sleep import deployments_to_wake as deployments_to_wake
from .sleep import grant_sleep as grant_sleep
from .sleep import request_wake as request_wake
from .sleep import wake_deployment as wake_deployment
from .sql import Tx as Tx
from .sql import each_in_savepoint as each_in_savepoint
from .sql import insert_rows as insert_rows
from .sql import insert_statement as insert_statement
from .sql import update_rows as update_rows
from .sql import update_statement as update_statement
from .sqlite import DEFAULT_BUSY_TIMEOUT as DEFAULT_BUSY_TIMEOUT
from .sqlite import SqliteStore as SqliteStore
from .sqlite import pending_migrations as pending_migrations
from .sqlite import read_version as read_version
from .views import ApprovalView as ApprovalView
from .views import DeploymentView as DeploymentView
from .views import DispatchView as DispatchView
from .views import RunHistory as RunHistory
from .views import RunView as RunView
from .views import change_views as change_views
from .views import count_by_status as count_by_status
from .views import deployment_of_run as deployment_of_run
from .views import deployments_changed as deployments_changed
from .views import get_approval as get_approval
from .views import get_deployment as get_deployment
from .views import get_dispatch as get_dispatch
from .views import get_run as get_run
from .views import list_approvals as list_approvals
from .views import list_deployments as list_deployments
from .views import list_dispatches as list_dispatches
from .views import list_runs as list_runs
from .views import read_history as read_history
from .views import resolve_deployment as resolve_deployment

__all__ = [
    "APPROVAL_EXPIRY",
    "BUSY_RESERVED",
    "BUSY_ROLLOUT",
    "DATABASE_ENV",
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_CHANGES_KEPT",
    "DEFAULT_ENTRYPOINT",
    "FEED_HOLD",
    "LATEST",
    "OPEN_DISPATCH",
    "QUARANTINE_SOURCE",
    "REPLY_KEY",
    "SHARED_GRACE",
    "SOURCE_DSN",
    "SOURCE_RELAY",
    "WITH_OTHERS",
    "Accepted",
    "AddressStatus",
    "AppliedRun",
    "ApprovalStatus",
    "ApprovalView",
    "Batches",
    "Bounced",
    "Change",
    "ChangeKind",
    "Collected",
    "Created",
    "DeadLetter",
    "DeploymentView",
    "DispatchStatus",
    "DispatchToSettle",
    "DispatchView",
    "DueMail",
    "DueTimer",
    "EventRun",
    "Fence",
    "Fire",
    "InboxFormat",
    "LeaseRound",
    "LeaseToken",
    "MailChange",
    "MailSettings",
    "MintParent",
    "NatsUser",
    "NewProducer",
    "NewRunEvent",
    "OnStep",
    "OutboundMail",
    "OutboundSpec",
    "OutboundStatus",
    "OutboundView",
    "Outcome",
    "Overdue",
    "OwnerRow",
    "Pending",
    "PendingTimer",
    "PolicyChange",
    "ProcessedRows",
    "ProducerStatus",
    "ProducerView",
    "QuarantinedDispatch",
    "Receipt",
    "RefusedByRun",
    "Rejected",
    "ReservedCount",
    "ReservedDispatch",
    "RetriedDispatch",
    "Rollout",
    "RunHistory",
    "RunMoved",
    "RunPosition",
    "RunView",
    "ScheduleView",
    "SettledDispatch",
    "SqliteStore",
    "StatePage",
    "Store",
    "Trigger",
    "Tx",
    "VersionStatus",
    "VersionView",
    "accept_alone",
    "accept_groups",
    "accept_triggers",
    "active_entrypoint",
    "active_producer_users",
    "add_schedule",
    "add_version",
    "address_status",
    "ask_approval",
    "asleep_deployments",
    "blob_named",
    "body_digest",
    "build_sources",
    "cancel_quarantined",
    "cancel_run",
    "cancel_timer",
    "change_views",
    "check_fence",
    "check_policy",
    "claim_timers",
    "collect_blobs",
    "commit_claim",
    "conflict_outcome",
    "count_by_status",
    "count_failures",
    "count_outbound",
    "count_quarantined",
    "count_reserved",
    "count_timers",
    "create_deployment",
    "decision_trigger",
    "decode_spec",
    "defer",
    "delete_deployment",
    "deployment_address",
    "deployment_of_run",
    "deployments_changed",
    "deployments_to_wake",
    "due_mail",
    "due_schedules",
    "due_timers",
    "each_in_savepoint",
    "earliest_schedule_due",
    "earliest_timer_due",
    "event_run",
    "feed_start",
    "find_overdue",
    "finish_rollout",
    "finish_run",
    "fire_message_id",
    "fire_schedule",
    "floor_seq",
    "get_approval",
    "get_deployment",
    "get_dispatch",
    "get_producer",
    "get_run",
    "get_version",
    "give_nats_identities",
    "grant_sleep",
    "hold_role",
    "hub_secret",
    "inbox_format",
    "insert_producer",
    "insert_rows",
    "insert_statement",
    "is_active_producer",
    "is_database_url",
    "keep_dead_letter",
    "last_change_id",
    "list_approvals",
    "list_deployments",
    "list_dispatches",
    "list_outbound",
    "list_parked",
    "list_producers",
    "list_runs",
    "list_schedules",
    "list_versions",
    "live_deployment_users",
    "load_reserved",
    "mark_bounced",
    "mark_delivered",
    "mark_failed",
    "mark_retry",
    "mark_sending",
    "mark_sent",
    "migrations_after",
    "mint_child",
    "name_child_entrypoint",
    "next_due",
    "one_mailbox",
    "open_store",
    "pause_deployment",
    "paused_deployments",
    "pending_migrations",
    "pending_rollouts",
    "postgres_schema_version",
    "put_back",
    "quarantined_dispatch",
    "read_changes",
    "read_feed",
    "read_history",
    "read_owner",
    "read_policy",
    "read_processed",
    "read_state_file",
    "read_state_page",
    "read_version",
    "record_answers",
    "record_event",
    "record_outbound",
    "release_all",
    "remove_producer",
    "remove_schedule",
    "renew_and_take",
    "request_rollout",
    "request_wake",
    "resolve_deployment",
    "resolve_producer",
    "resume_if_outdated",
    "resume_run",
    "resume_suspended",
    "retry_dispatch",
    "run_timers",
    "schema_version",
    "sender_refusal",
    "set_mail_settings",
    "set_policy",
    "set_timer",
    "settings_at",
    "settle_at_boot",
    "share_health",
    "start_run",
    "still_open",
    "suspend_run",
    "transfer",
    "trim_changes",
    "trim_history",
    "unpause_deployment",
    "update_rows",
    "update_statement",
    "wake_deployment",
    "write_processed",
]
