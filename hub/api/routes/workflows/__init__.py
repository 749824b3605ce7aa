"""The routes under ``/workflows/deployments``: a deployment itself (with
``GET /workflows/wakes``), its versions and its schedules."""

from .deployments import deployment_routes as deployment_routes
from .schedules import schedule_routes as schedule_routes
from .versions import version_routes as version_routes

__all__ = ["deployment_routes", "schedule_routes", "version_routes"]
