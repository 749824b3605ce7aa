"""The hub's HTTP API: the Starlette app and its routes, the one gate every
request passes, the live event stream (``GET /events``), and the HTTP/1.1
server it runs on (``http``)."""

from .app import ApiSettings as ApiSettings
from .app import create_app as create_app
from .events import ChangeFeed as ChangeFeed
from .events import EventLimits as EventLimits
from .http import HttpLimits as HttpLimits
from .http import HttpServer as HttpServer
from .mail import MailAnswers as MailAnswers
from .mail import mail_answers as mail_answers

__all__ = [
    "ApiSettings",
    "ChangeFeed",
    "EventLimits",
    "HttpLimits",
    "HttpServer",
    "MailAnswers",
    "create_app",
    "mail_answers",
]
