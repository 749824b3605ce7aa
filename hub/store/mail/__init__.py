"""Mail in the store: a deployment's mail settings, the keys of the signed
reply addresses, the columns of migration 20 (a dispatch's mail context,
the rich parts and bounces of outgoing mail), and a bounce recorded."""

from .bounces import SOURCE_DSN as SOURCE_DSN
from .bounces import SOURCE_RELAY as SOURCE_RELAY
from .bounces import Bounced as Bounced
from .bounces import bounce_message_id as bounce_message_id
from .bounces import mark_bounced as mark_bounced
from .bounces import record_bounce as record_bounce
from .schema import MAIL_PG as MAIL_PG
from .schema import add_mail as add_mail
from .secrets import REPLY_KEY as REPLY_KEY
from .secrets import hub_secret as hub_secret
from .settings import DEFAULT_SETTINGS as DEFAULT_SETTINGS
from .settings import MailSettings as MailSettings
from .settings import decode_settings as decode_settings
from .settings import encode_settings as encode_settings
from .settings import mail_settings as mail_settings

__all__ = [
    "DEFAULT_SETTINGS",
    "MAIL_PG",
    "REPLY_KEY",
    "SOURCE_DSN",
    "SOURCE_RELAY",
    "Bounced",
    "MailSettings",
    "add_mail",
    "bounce_message_id",
    "decode_settings",
    "encode_settings",
    "hub_secret",
    "mail_settings",
    "mark_bounced",
    "record_bounce",
]
