"""Mail in over SMTP (``--smtp HOST:PORT``): any mail client, sendmail-style
tool or ``smtplib`` triggers runs. Each recipient of a message is one mail
trigger; all of a message's triggers are accepted in one transaction by the
hub's acceptor, and ``250`` is answered only after it committed. Reports
to the bounce addresses of outgoing mail bounce it to its run.

``SmtpServer`` is imported the first time it is read: it brings aiosmtpd
(with attrs) and the sender checks (pyspf, dkimpy, dnspython), a tenth of a
second and more that a hub without ``--smtp`` never uses (docs/performance.md,
"A `mailrun` process's start").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.lazy import lazy_names

from ._bounces import DeliveryReport as DeliveryReport
from ._bounces import FailedRecipient as FailedRecipient
from ._bounces import read_report as read_report
from ._config import MAX_RECIPIENTS as MAX_RECIPIENTS
from ._config import PASSWORD_ENV as PASSWORD_ENV
from ._config import USER_ENV as USER_ENV
from ._config import SmtpConfig as SmtpConfig
from ._config import is_loopback as is_loopback
from ._config import smtp_config as smtp_config
from ._message import ParsedMail as ParsedMail
from ._message import parse_message as parse_message

if TYPE_CHECKING:
    from ._server import SmtpServer as SmtpServer

# The lazy name and its module; the TYPE_CHECKING import above says the same
# to mypy (tests/hub/test_lazy_packages.py holds the two together).
_LAZY = {"SmtpServer": "._server"}

__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__all__ = [
    "MAX_RECIPIENTS",
    "PASSWORD_ENV",
    "USER_ENV",
    "DeliveryReport",
    "FailedRecipient",
    "ParsedMail",
    "SmtpConfig",
    "SmtpServer",
    "is_loopback",
    "parse_message",
    "read_report",
    "smtp_config",
]
