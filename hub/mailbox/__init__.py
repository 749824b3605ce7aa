"""Mail addresses the hub hands out and reads back: plus-addressing
(``name+tag@domain``) and the signed reply addresses of outgoing mail."""

from .addresses import Address as Address
from .addresses import parse_address as parse_address
from .reply_tokens import is_reply_token as is_reply_token
from .reply_tokens import reply_address as reply_address
from .reply_tokens import reply_token as reply_token
from .reply_tokens import verify_token as verify_token

__all__ = [
    "Address",
    "is_reply_token",
    "parse_address",
    "reply_address",
    "reply_token",
    "verify_token",
]
