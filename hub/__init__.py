"""The control plane: store, deployments, mail acceptance, dispatch, HTTP API."""

from ._accept import Accepted as Accepted
from ._accept import Rejected as Rejected
from ._accept import Trigger as Trigger
from ._accept import accept_triggers as accept_triggers
from ._acceptor import Acceptor as Acceptor
from ._deploy import create_deployment as create_deployment
from ._deploy import delete_deployment as delete_deployment
from ._errors import HubError as HubError
from ._errors import MigrationError as MigrationError
from ._errors import StoreUnavailable as StoreUnavailable
from ._http import create_app as create_app
from ._migrations import ApprovalStatus as ApprovalStatus
from ._migrations import DispatchStatus as DispatchStatus
from ._migrations import pending_migrations as pending_migrations
from ._server import HubConfig as HubConfig
from ._server import HubHandle as HubHandle
from ._server import serve_hub as serve_hub
from ._store import Store as Store

__all__ = [
    "Accepted",
    "Acceptor",
    "ApprovalStatus",
    "DispatchStatus",
    "HubConfig",
    "HubError",
    "HubHandle",
    "MigrationError",
    "Rejected",
    "Store",
    "StoreUnavailable",
    "Trigger",
    "accept_triggers",
    "create_app",
    "create_deployment",
    "delete_deployment",
    "pending_migrations",
    "serve_hub",
]
