"""The control plane: store, deployments, mail acceptance, dispatch, HTTP API;
and the producers' client of its NATS mail ingress (``IngressClient``).

The errors are imported with the package; every other name is imported the
first time it is read (``from hub import Store`` works as ever): the CLI and
``mailrun up`` import ``hub.cli`` or ``hub.up``, which import this package
first, and must not pay for the HTTP server, the store and the intake they do
not use (docs/testing.md, "What the suite costs").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.lazy import lazy_names

from ._errors import HubError as HubError
from ._errors import IngressError as IngressError
from ._errors import IngressRefused as IngressRefused
from ._errors import IngressUnavailable as IngressUnavailable
from ._errors import MigrationError as MigrationError
from ._errors import StoreConflict as StoreConflict
from ._errors import StoreUnavailable as StoreUnavailable

if TYPE_CHECKING:
    from ._ingress import IngressClient as IngressClient
    from ._ingress import ingress_mail as ingress_mail
    from ._listeners import bind_socket as bind_socket
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

# Each lazy name and the module it comes from; the TYPE_CHECKING imports above
# say the same to mypy (tests/hub/test_lazy_packages.py holds the two together).
_LAZY = {
    "Accepted": ".store",
    "Acceptor": ".intake",
    "ApprovalStatus": ".store",
    "DispatchStatus": ".store",
    "HubHandle": "._server",
    "HubSettings": "._settings",
    "IngressClient": "._ingress",
    "Rejected": ".store",
    "Store": ".store",
    "Trigger": ".store",
    "accept_triggers": ".store",
    "bind_socket": "._listeners",
    "create_app": ".api",
    "create_deployment": ".store",
    "delete_deployment": ".store",
    "ingress_mail": "._ingress",
    "pending_migrations": ".store",
    "serve_hub": "._server",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)

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
    "bind_socket",
    "create_app",
    "create_deployment",
    "delete_deployment",
    "ingress_mail",
    "pending_migrations",
    "serve_hub",
]
