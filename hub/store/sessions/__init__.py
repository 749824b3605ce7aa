"""The hub's side of sidecar sessions in the store: the fences every write
for a sidecar is made under, the leases and roles of several hubs sharing
one PostgreSQL, the owner a hello claims, the child runs a sidecar mints,
and the identities and versions commands read from a state dir without a
hub."""

from .fencing import Fence as Fence
from .fencing import LeaseToken as LeaseToken
from .fencing import check_fence as check_fence
from .leases import LEASES_SCHEMA as LEASES_SCHEMA
from .leases import LeaseRound as LeaseRound
from .leases import hold_role as hold_role
from .leases import release_all as release_all
from .leases import renew_and_take as renew_and_take
from .leases import share_health as share_health
from .minting import MintParent as MintParent
from .minting import mint_child as mint_child
from .ownership import OwnerRow as OwnerRow
from .ownership import commit_claim as commit_claim
from .ownership import read_owner as read_owner
from .state_files import NatsUser as NatsUser
from .state_files import active_producer_users as active_producer_users
from .state_files import inbox_format as inbox_format
from .state_files import live_deployment_users as live_deployment_users
from .state_files import postgres_schema_version as postgres_schema_version
from .state_files import read_state_file as read_state_file
from .state_files import schema_version as schema_version

__all__ = [
    "Fence",
    "LeaseRound",
    "LeaseToken",
    "MintParent",
    "NatsUser",
    "OwnerRow",
    "active_producer_users",
    "check_fence",
    "commit_claim",
    "hold_role",
    "inbox_format",
    "live_deployment_users",
    "mint_child",
    "postgres_schema_version",
    "read_owner",
    "read_state_file",
    "release_all",
    "renew_and_take",
    "schema_version",
    "share_health",
]
