"""Mail addresses the hub hands out and reads back: plus-addressing
(``name+tag@domain``), the signed reply addresses of outgoing mail and its
signed bounce addresses (its envelope sender), and the thread a mail names
(In-Reply-To, References)."""

from .addresses import Address as Address
from .addresses import parse_address as parse_address
from .bounce_addresses import BOUNCE_NAME as BOUNCE_NAME
from .bounce_addresses import bounce_address as bounce_address
from .bounce_addresses import bounce_row as bounce_row
from .bounce_addresses import is_bounce_address as is_bounce_address
from .reply_tokens import is_reply_token as is_reply_token
from .reply_tokens import reply_address as reply_address
from .reply_tokens import reply_token as reply_token
from .reply_tokens import verify_token as verify_token
from .threads import MAX_THREAD as MAX_THREAD
from .threads import mail_context as mail_context
from .threads import message_ids as message_ids
from .threads import reply_candidates as reply_candidates
from .threads import thread_of as thread_of

__all__ = [
    "BOUNCE_NAME",
    "MAX_THREAD",
    "Address",
    "bounce_address",
    "bounce_row",
    "is_bounce_address",
    "is_reply_token",
    "mail_context",
    "message_ids",
    "parse_address",
    "reply_address",
    "reply_candidates",
    "reply_token",
    "thread_of",
    "verify_token",
]
