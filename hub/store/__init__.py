"""The hub's store: everything that touches the hub's database, in rooms by
concern, and the names the other rooms of the hub use, re-exported here.

Each room's ``__all__`` is what it offers the rest of the hub, taken whole
below; the other names its package binds are for its neighbours in the
store, and what only a room's own modules use stays in them.

- ``accepting``: triggers read-or-minted into dispatches, in groups;
- ``delivery``: dispatches sent and settled, run events applied, redelivery,
  quarantine, dead letters, trimming, blobs;
- ``sessions``: fences, leases, ownership, minting, a state dir's files;
- ``deployments``: deployments, their versions, identities, producers;
- ``views``: the read models the HTTP API and ``GET /events`` answer with;
- ``failures``: runs that keep failing or are stopped from outside:
  suspended runs resumed, parked dispatches retried, runs cancelled;
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

from .accepting import *
from .base import Store as Store
from .batching import Batches as Batches
from .batching import Pending as Pending
from .clock import *
from .delivery import *
from .deployments import *
from .failures import *
from .feed import *
from .mail import *
from .migrations import *
from .opening import DATABASE_ENV as DATABASE_ENV
from .opening import is_database_url as is_database_url
from .opening import open_store as open_store
from .outbound import *
from .schema import *
from .sessions import *
from .sleep import *
from .sql import *
from .sqlite import *
from .views import *

__all__ = [
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
    "SOURCE_DSN",
    "SOURCE_RELAY",
    "WITH_OTHERS",
    "Accepted",
    "AddressStatus",
    "ApprovalStatus",
    "Batches",
    "Change",
    "DeadLetter",
    "DeploymentView",
    "DispatchStatus",
    "DispatchToSettle",
    "DueMail",
    "DueTimer",
    "EventRun",
    "Fence",
    "Fire",
    "LeaseRound",
    "LeaseToken",
    "MailChange",
    "MailSettings",
    "MintParent",
    "NatsUser",
    "NewRunEvent",
    "OnStep",
    "OutboundMail",
    "OutboundSpec",
    "OutboundStatus",
    "Outcome",
    "Overdue",
    "OwnerRow",
    "Pending",
    "PolicyChange",
    "ProducerStatus",
    "ProducerView",
    "Receipt",
    "RefusedByRun",
    "Rejected",
    "ReservedCount",
    "ReservedDispatch",
    "Rollout",
    "RunHistory",
    "RunMoved",
    "ScheduleView",
    "SettledDispatch",
    "SqliteStore",
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
    "is_active_producer",
    "is_asleep",
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
    "resolve_deployment",
    "resolve_producer",
    "resume_if_outdated",
    "resume_run",
    "retry_dispatch",
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
