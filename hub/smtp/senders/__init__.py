"""Who wrote a mail that came over SMTP: the sender checks of the SMTP
ingress. The hub's own SPF, DKIM and DMARC checks through its resolver
(``--dns-server``, a budget per mail), or, for mail a trusted relay hands
over (``--smtp-trusted-relay``), that relay's ``Authentication-Results``;
either way a :class:`runtime.wire.MailAuth` for the mail's context; and
the SMTP answers of the deployments' allow and deny lists and of their
``require_dmarc``."""

from .checks import verify_sender as verify_sender
from .gates import dmarc_refusal as dmarc_refusal
from .gates import envelope_refusal as envelope_refusal
from .lookups import BUDGET as BUDGET
from .lookups import Lookups as Lookups
from .lookups import make_resolver as make_resolver
from .relay import relay_verdicts as relay_verdicts
from .senders import SenderChecks as SenderChecks

__all__ = [
    "BUDGET",
    "Lookups",
    "SenderChecks",
    "dmarc_refusal",
    "envelope_refusal",
    "make_resolver",
    "relay_verdicts",
    "verify_sender",
]
