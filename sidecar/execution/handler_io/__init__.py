"""A handler's input and output as values: the items it receives (one
struct per dispatch kind, built from inbox envelopes) and the mail it sends
(``ctx.send``'s arguments checked, its Message-ID made)."""

from ._build import cancel_order as cancel_order
from ._build import item_of as item_of
from ._kinds import ApprovalDecision as ApprovalDecision
from ._kinds import AuthVerdict as AuthVerdict
from ._kinds import Bounce as Bounce
from ._kinds import Cancel as Cancel
from ._kinds import ChildEnded as ChildEnded
from ._kinds import Item as Item
from ._kinds import Mail as Mail
from ._kinds import MailAuth as MailAuth
from ._kinds import ScheduleFire as ScheduleFire
from ._kinds import Signal as Signal
from ._kinds import Start as Start
from ._kinds import Timer as Timer
from ._kinds import auth_of as auth_of
from ._kinds import wire_auth as wire_auth
from ._outgoing import HUB_HEADERS as HUB_HEADERS
from ._outgoing import Attachment as Attachment
from ._outgoing import checked_mail as checked_mail
from ._outgoing import header_id as header_id
from ._outgoing import mail_domain as mail_domain

__all__ = [
    "HUB_HEADERS",
    "ApprovalDecision",
    "Attachment",
    "AuthVerdict",
    "Bounce",
    "Cancel",
    "ChildEnded",
    "Item",
    "Mail",
    "MailAuth",
    "ScheduleFire",
    "Signal",
    "Start",
    "Timer",
    "auth_of",
    "cancel_order",
    "checked_mail",
    "header_id",
    "item_of",
    "mail_domain",
    "wire_auth",
]
