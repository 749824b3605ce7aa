"""Mail addresses the hub hands out and reads back: plus-addressing
(``name+tag@domain``), the signed reply addresses of outgoing mail, and the
thread a mail names (In-Reply-To, References)."""

from .addresses import Address as Address
from .addresses import parse_address as parse_address
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
    "MAX_THREAD",
    "Address",
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
