"""Mail in the store: a deployment's mail settings (read, checked, written,
and asked who may write) and its domain's catch-all, the keys of the signed
reply addresses, the mail runs sent that replies are routed by, and the columns
of migration 20 (a dispatch's mail context, the rich parts and bounces of
outgoing mail)."""

from .catch_all import catch_alls as catch_alls
from .catch_all import set_catch_all as set_catch_all
from .replies import SentMail as SentMail
from .replies import sent_mail as sent_mail
from .replies import sent_row as sent_row
from .schema import MAIL_PG as MAIL_PG
from .schema import add_mail as add_mail
from .secrets import REPLY_KEY as REPLY_KEY
from .secrets import hub_secret as hub_secret
from .senders import settings_at as settings_at
from .senders import settings_of as settings_of
from .settings import DEFAULT_SETTINGS as DEFAULT_SETTINGS
from .settings import MailChange as MailChange
from .settings import MailSettings as MailSettings
from .settings import changed_settings as changed_settings
from .settings import decode_settings as decode_settings
from .settings import encode_settings as encode_settings
from .settings import mail_settings as mail_settings
from .settings import sender_refusal as sender_refusal
from .writing import set_mail_settings as set_mail_settings

__all__ = [
    "REPLY_KEY",
    "MailChange",
    "MailSettings",
    "hub_secret",
    "sender_refusal",
    "set_mail_settings",
    "settings_at",
]
