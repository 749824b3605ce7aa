"""The web console at ``/``: server-rendered pages from templates, one
script and one stylesheet, kept live by ``GET /events``."""

from .pages import console_routes as console_routes

__all__ = ["console_routes"]
