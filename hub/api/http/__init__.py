"""The hub's own HTTP/1.1 server, on httptools' parser: the whole ASGI app,
and a fast path for the requests it answers without it (the hub's mail)."""

from .fast import FastPath as FastPath
from .limits import HttpLimits as HttpLimits
from .protocol import ABORT_EXTENSION as ABORT_EXTENSION
from .protocol import BODY_ARRIVED_EXTENSION as BODY_ARRIVED_EXTENSION
from .server import HttpServer as HttpServer

__all__ = [
    "ABORT_EXTENSION",
    "BODY_ARRIVED_EXTENSION",
    "FastPath",
    "HttpLimits",
    "HttpServer",
]
