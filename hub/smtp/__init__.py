"""Mail in over SMTP (``--smtp HOST:PORT``): any mail client, sendmail-style
tool or ``smtplib`` triggers runs. Each recipient of a message is one mail
trigger; all of a message's triggers are accepted in one transaction by the
hub's acceptor, and ``250`` is answered only after it committed. Reports
to the bounce addresses of outgoing mail bounce it to its run."""

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
from ._server import SmtpServer as SmtpServer

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
