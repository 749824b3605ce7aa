"""Outgoing mail in the store: the ``outbound_mail`` rows a run's mail becomes
(``outbox.py``), their rich parts (``spec.py``) and the relay's writes as it
sends them (``relaying.py``), and a bounce recorded against one
(``bounces.py``)."""

from .bounces import SOURCE_DSN as SOURCE_DSN
from .bounces import SOURCE_RELAY as SOURCE_RELAY
from .bounces import bounce_message_id as bounce_message_id
from .bounces import mark_bounced as mark_bounced
from .bounces import record_bounce as record_bounce
from .outbox import OutboundMail as OutboundMail
from .outbox import OutboundStatus as OutboundStatus
from .outbox import add_outbound_mail as add_outbound_mail
from .outbox import count_outbound as count_outbound
from .outbox import list_outbound as list_outbound
from .outbox import record_outbound as record_outbound
from .relaying import DueMail as DueMail
from .relaying import defer as defer
from .relaying import due_mail as due_mail
from .relaying import mark_failed as mark_failed
from .relaying import mark_retry as mark_retry
from .relaying import mark_sending as mark_sending
from .relaying import mark_sent as mark_sent
from .relaying import next_due as next_due
from .relaying import settle_at_boot as settle_at_boot
from .spec import OutboundSpec as OutboundSpec
from .spec import decode_spec as decode_spec
from .spec import one_mailbox as one_mailbox

__all__ = [
    "SOURCE_DSN",
    "SOURCE_RELAY",
    "DueMail",
    "OutboundMail",
    "OutboundSpec",
    "OutboundStatus",
    "count_outbound",
    "decode_spec",
    "defer",
    "due_mail",
    "list_outbound",
    "mark_bounced",
    "mark_failed",
    "mark_retry",
    "mark_sending",
    "mark_sent",
    "next_due",
    "one_mailbox",
    "record_outbound",
    "settle_at_boot",
]
