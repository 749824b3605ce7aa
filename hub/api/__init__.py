"""The hub's HTTP API: the Starlette app, request bodies, metrics, the live
event stream (``GET /events``), and the uvicorn server it runs on."""

from .app import ApiSettings as ApiSettings
from .app import create_app as create_app
from .feed import ChangeFeed as ChangeFeed
from .feed import EventLimits as EventLimits
from .lane import MailAnswers as MailAnswers
from .lane import mail_answers as mail_answers
from .server import HttpLimits as HttpLimits
from .server import HttpServer as HttpServer
from .server import bind_socket as bind_socket

__all__ = [
    "ApiSettings",
    "ChangeFeed",
    "EventLimits",
    "HttpLimits",
    "HttpServer",
    "MailAnswers",
    "bind_socket",
    "create_app",
    "mail_answers",
]
