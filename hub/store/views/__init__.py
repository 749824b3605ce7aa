"""The store's read models: the JSON views of deployments, runs, dispatches and
approvals the HTTP API answers with (the deployments also as changed after a
point of the change feed), a run's history as replay reads it, and the views
``GET /events`` sends for a batch of changes."""

from .approvals import get_approval as get_approval
from .approvals import list_approvals as list_approvals
from .changed import Changed as Changed
from .changed import deployments_changed as deployments_changed
from .events import change_views as change_views
from .history import RunHistory as RunHistory
from .history import read_history as read_history
from .queries import DISPATCHES_BY_ID as DISPATCHES_BY_ID
from .queries import DeploymentView as DeploymentView
from .queries import DispatchView as DispatchView
from .queries import RunView as RunView
from .queries import count_by_status as count_by_status
from .queries import deployment_of_run as deployment_of_run
from .queries import dispatch_view as dispatch_view
from .queries import get_deployment as get_deployment
from .queries import get_dispatch as get_dispatch
from .queries import get_run as get_run
from .queries import list_deployments as list_deployments
from .queries import list_dispatches as list_dispatches
from .queries import list_runs as list_runs
from .queries import resolve_deployment as resolve_deployment

__all__ = [
    "DeploymentView",
    "RunHistory",
    "change_views",
    "count_by_status",
    "deployment_of_run",
    "deployments_changed",
    "get_approval",
    "get_deployment",
    "get_dispatch",
    "get_run",
    "list_approvals",
    "list_deployments",
    "list_dispatches",
    "list_runs",
    "read_history",
    "resolve_deployment",
]
