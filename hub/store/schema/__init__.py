"""The hub's schema: the status vocabularies of its tables, release 1's schema
and the SQLite steps that build this release's from it, and PostgreSQL's
schema 12 at once. The migrations that apply them in order are
``hub.store.migrations``."""

from .postgres import BASELINE as BASELINE
from .release_one import create_v1 as create_v1
from .release_one import migrate_v1_to_v2 as migrate_v1_to_v2
from .statuses import KEEPS_BODY as KEEPS_BODY
from .statuses import QUARANTINE_SOURCE as QUARANTINE_SOURCE
from .statuses import ApprovalStatus as ApprovalStatus
from .statuses import DispatchStatus as DispatchStatus
from .steps import FAILURE_POLICIES_PG as FAILURE_POLICIES_PG
from .steps import INLINE_DIGEST_PG as INLINE_DIGEST_PG
from .steps import RUN_SETTINGS_PG as RUN_SETTINGS_PG
from .steps import add_columns as add_columns
from .steps import add_dead_letter_deployment as add_dead_letter_deployment
from .steps import add_failure_policies as add_failure_policies
from .steps import add_inline_digest as add_inline_digest
from .steps import add_nats_user as add_nats_user
from .steps import add_owner_home as add_owner_home
from .steps import add_raw_message as add_raw_message
from .steps import add_retention_indexes as add_retention_indexes
from .steps import add_run_settings as add_run_settings
from .steps import add_run_step as add_run_step
from .steps import statements as statements

__all__ = [
    "QUARANTINE_SOURCE",
    "ApprovalStatus",
    "DispatchStatus",
]
