"""Mail intake: what turns a mail from any door (HTTP, SMTP, the NATS
ingress) into triggers, and the acceptor that commits them in groups.

The doors (``hub.api``, ``hub.smtp``, ``hub.wire``'s ingress) import this
room, never each other; the SQL the acceptor runs is the store's
(``hub.store.accept_triggers``)."""

from .batches import MAX_BATCH as MAX_BATCH
from .batches import accept_mails as accept_mails
from .digests import digest_of as digest_of
from .digests import with_digest as with_digest
from .group_commit import HEAVY_BYTES as HEAVY_BYTES
from .group_commit import Acceptor as Acceptor
from .group_commit import OnAccepted as OnAccepted
from .mails import MailBatchIn as MailBatchIn
from .mails import mail_trigger as mail_trigger
from .mails import reserved_message_id as reserved_message_id
from .mails import single_line as single_line

__all__ = [
    "HEAVY_BYTES",
    "MAX_BATCH",
    "Acceptor",
    "MailBatchIn",
    "OnAccepted",
    "accept_mails",
    "digest_of",
    "mail_trigger",
    "reserved_message_id",
    "single_line",
    "with_digest",
]
