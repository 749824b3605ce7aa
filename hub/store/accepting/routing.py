"""Where a mail goes within the deployment it came to, decided once for every
door (SMTP, ``POST /mail``, the NATS ingress, mail between deployments): its
domain's catch-all takes an address nobody has, and a reply goes to the run
that sent the mail it answers.

A batch reads what its mails need before it decides (``batch.py``):

- catch-alls, only for addresses no live deployment has;
- replies: In-Reply-To, else References from the newest back, naming a mail
  a run of that deployment sent (``hub.store.mail.sent_mail``); else the
  recipient's tag, when it is a reply token this hub signed for that
  deployment's address (``hub.mailbox.verify_token``) and its outbox row is
  that deployment's. A token that does not verify is a plain tag;
- the ``replies_to_ended`` setting of each deployment a reply came to.

What it read completes each mail's context (``routed_by``, a token's tag
dropped, ``in_reply_to`` from the row a token names); whether the run
answered is live is decided with the batch's other runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec

from runtime.wire import (
    ROUTED_BY_CATCH_ALL,
    ROUTED_BY_HEADERS,
    ROUTED_BY_REPLY_ADDRESS,
    MailContext,
)

from ...mailbox import is_reply_token, reply_candidates, verify_token
from ..mail import REPLY_KEY, SentMail, catch_alls, hub_secret, mail_settings, sent_mail, sent_row
from ..sql import Tx
from .triggers import Trigger

REFUSE = "refuse"
"""``replies_to_ended``: a reply to a run that has ended is refused."""


@dataclass(frozen=True)
class Reply:
    """The run a mail answers, and how it was found (a ``ROUTED_BY_*``)."""

    sent: SentMail
    routed_by: str


def _routed(t: Trigger) -> bool:
    """Mail the routing decides for: it came to an address, for no named run."""
    return t.context is not None and t.address is not None and t.run_id is None


def _domain(address: str) -> str:
    return address.rpartition("@")[2]


class Routing:
    """A batch's catch-alls and replies, read before it decides."""

    def __init__(self) -> None:
        self.caught: dict[str, str] = {}  # address -> the catch-all that takes it
        self.replies: dict[int, Reply] = {}  # id(trigger) -> the run it answers
        self.contexts: dict[int, MailContext] = {}  # id(trigger) -> its completed context
        self.refuse_ended: set[str] = set()  # deployments that refuse replies to ended runs

    def catch(self, tx: Tx, addresses: Sequence[str]) -> list[str]:
        """Find the catch-alls of ``addresses`` (which no live deployment
        has); return their deployment ids, for the batch to load."""
        found = catch_alls(tx, sorted({_domain(a) for a in addresses}))
        for address in addresses:
            if (dep_id := found.get(_domain(address))) is not None:
                self.caught[address] = dep_id
        return sorted(set(self.caught.values()))

    def find_replies(
        self,
        tx: Tx,
        triggers: Sequence[Trigger],
        deployment_of: Callable[[Trigger], str | None],
        address_of: Callable[[str], str],
    ) -> list[str]:
        """Complete each mail's context and find the run it answers;
        return those runs' ids, for the batch to load."""
        wanted: dict[str, set[str]] = {}
        mails: list[tuple[Trigger, str]] = []
        for t in triggers:
            if _routed(t) and (dep_id := deployment_of(t)) is not None:
                mails.append((t, dep_id))
                assert t.context is not None
                wanted.setdefault(dep_id, set()).update(reply_candidates(t.context))
        sent = {
            dep_id: sent_mail(tx, dep_id, sorted(ids)) for dep_id, ids in sorted(wanted.items())
        }
        key: bytes | None = None
        for t, dep_id in mails:
            context = t.context
            assert context is not None and t.address is not None
            if t.address in self.caught:
                context = msgspec.structs.replace(context, routed_by=ROUTED_BY_CATCH_ALL)
            reply = next(
                (
                    Reply(found, ROUTED_BY_HEADERS)
                    for mid in reply_candidates(context)
                    if (found := sent[dep_id].get(mid)) is not None
                ),
                None,
            )
            tag = context.tag
            if tag is not None and is_reply_token(tag) and t.address not in self.caught:
                key = key if key is not None else hub_secret(tx, REPLY_KEY)
                row = self._token_row(tx, key, address_of(dep_id), tag, dep_id)
                if row is not None:
                    context = msgspec.structs.replace(
                        context, tag=None, in_reply_to=context.in_reply_to or row.message_id
                    )
                    reply = reply or Reply(row, ROUTED_BY_REPLY_ADDRESS)
            self.contexts[id(t)] = context
            if reply is not None:
                self.replies[id(t)] = reply
        for dep_id in sorted({dep_id for t, dep_id in mails if id(t) in self.replies}):
            if mail_settings(tx, dep_id).replies_to_ended == REFUSE:
                self.refuse_ended.add(dep_id)
        return sorted({r.sent.run_id for r in self.replies.values()})

    @staticmethod
    def _token_row(tx: Tx, key: bytes, address: str, tag: str, dep_id: str) -> SentMail | None:
        row_id = verify_token(key, address, tag)
        found = sent_row(tx, row_id) if row_id is not None else None
        if found is None or found[0] != dep_id:
            return None
        return found[1]
