"""Who wrote a mail that came over SMTP: the sender checks of the SMTP
ingress. The hub's own SPF, DKIM and DMARC checks through its resolver
(``--dns-server``, a budget per mail), or, for mail a trusted relay hands
over (``--smtp-trusted-relay``), that relay's ``Authentication-Results``;
either way a :class:`runtime.wire.MailAuth` for the mail's context."""

from .checks import verify_sender as verify_sender
from .lookups import BUDGET as BUDGET
from .lookups import Lookups as Lookups
from .lookups import make_resolver as make_resolver
from .relay import relay_verdicts as relay_verdicts
from .senders import SenderChecks as SenderChecks

__all__ = [
    "BUDGET",
    "Lookups",
    "SenderChecks",
    "make_resolver",
    "relay_verdicts",
    "verify_sender",
]
