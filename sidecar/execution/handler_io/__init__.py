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
from ._outgoing import attachments as attachments
from ._outgoing import extra_headers as extra_headers
from ._outgoing import header_id as header_id
from ._outgoing import mail_domain as mail_domain
from ._outgoing import mailbox as mailbox
from ._outgoing import mailboxes as mailboxes
from ._outgoing import message_id as message_id
from ._outgoing import message_ids as message_ids
from ._outgoing import one_line as one_line
from ._outgoing import sized as sized

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
    "attachments",
    "auth_of",
    "cancel_order",
    "extra_headers",
    "header_id",
    "item_of",
    "mail_domain",
    "mailbox",
    "mailboxes",
    "message_id",
    "message_ids",
    "one_line",
    "sized",
    "wire_auth",
]
