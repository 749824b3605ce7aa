"""The control plane: store, deployments, mail acceptance, dispatch, HTTP API;
and the producers' client of its NATS mail ingress (``IngressClient``)."""

from ._errors import HubError as HubError
from ._errors import IngressError as IngressError
from ._errors import IngressRefused as IngressRefused
from ._errors import IngressUnavailable as IngressUnavailable
from ._errors import MigrationError as MigrationError
from ._errors import StoreConflict as StoreConflict
from ._errors import StoreUnavailable as StoreUnavailable
from ._ingress import IngressClient as IngressClient
from ._ingress import ingress_mail as ingress_mail
from ._server import HubHandle as HubHandle
from ._server import serve_hub as serve_hub
from ._settings import HubSettings as HubSettings
from .api import create_app as create_app
from .intake import Acceptor as Acceptor
from .store import Accepted as Accepted
from .store import ApprovalStatus as ApprovalStatus
from .store import DispatchStatus as DispatchStatus
from .store import Rejected as Rejected
from .store import Store as Store
from .store import Trigger as Trigger
from .store import accept_triggers as accept_triggers
from .store import create_deployment as create_deployment
from .store import delete_deployment as delete_deployment
from .store import pending_migrations as pending_migrations

__all__ = [
    "Accepted",
    "Acceptor",
    "ApprovalStatus",
    "DispatchStatus",
    "HubError",
    "HubHandle",
    "HubSettings",
    "IngressClient",
    "IngressError",
    "IngressRefused",
    "IngressUnavailable",
    "MigrationError",
    "Rejected",
    "Store",
    "StoreConflict",
    "StoreUnavailable",
    "Trigger",
    "accept_triggers",
    "create_app",
    "create_deployment",
    "delete_deployment",
    "ingress_mail",
    "pending_migrations",
    "serve_hub",
]
