"""The API's routes, by resource family: a deployment, its versions and
schedules (``workflows``); runs, their failures, approvals and replay
(``runs``); triggers (signals, and the mail the server answers); producers;
health and metrics. Each module gives the app a list of routes made over the
shared ``RouteContext``."""

from .health import health_routes as health_routes
from .metrics import metrics_routes as metrics_routes
from .producers import producer_routes as producer_routes
from .runs import approval_routes as approval_routes
from .runs import failure_routes as failure_routes
from .runs import replay_routes as replay_routes
from .runs import run_routes as run_routes
from .triggers import post_batch as post_batch
from .triggers import post_mail as post_mail
from .triggers import trigger_routes as trigger_routes
from .workflows import deployment_routes as deployment_routes
from .workflows import schedule_routes as schedule_routes
from .workflows import version_routes as version_routes

__all__ = [
    "approval_routes",
    "deployment_routes",
    "failure_routes",
    "health_routes",
    "metrics_routes",
    "post_batch",
    "post_mail",
    "producer_routes",
    "replay_routes",
    "run_routes",
    "schedule_routes",
    "trigger_routes",
    "version_routes",
]
