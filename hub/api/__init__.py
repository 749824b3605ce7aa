"""The hub's HTTP API: the Starlette app, request bodies, metrics, and the
uvicorn server it runs on."""

from .app import ApiSettings as ApiSettings
from .app import create_app as create_app
from .server import HttpLimits as HttpLimits
from .server import HttpServer as HttpServer
from .server import bind_socket as bind_socket

__all__ = ["ApiSettings", "HttpLimits", "HttpServer", "bind_socket", "create_app"]
