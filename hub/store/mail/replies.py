"""Which run a reply answers: the mail a run sent, found by its Message-ID
or by the outbox row a reply address names.

Mail that left through the relay is a row of ``outbound_mail``, found by
its ``message_id`` (indexed) within the deployment the reply came to, never
another's. Mail a run sent to another deployment of this hub never had such
a row: its Message-ID (``<{dispatch id}.{n}@domain>``, runtime.wire's
``MailSent.header_id``), like the message id its recipient's item carries
(``{dispatch id}:mail:{n}``), names the dispatch whose handler sent it, so
that dispatch of the deployment is the run's. A dispatch trimmed since is
forgotten: the reply goes to the top-level run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from ..sql import Tx, json_array, sql

_IN = "IN (SELECT value FROM json_each(?))"
_IN_PG = "IN (SELECT value FROM json_array_elements_text(CAST(? AS json)))"
_SENT = "SELECT message_id, run_id, id FROM outbound_mail WHERE deployment_id = ? AND message_id "
_SENT_BY_ID = sql(_SENT + _IN, postgres=_SENT + _IN_PG)
_DISPATCHES = "SELECT id, run_id FROM workflow_run_dispatch WHERE deployment_id = ? AND id "
_DISPATCH_RUNS = sql(_DISPATCHES + _IN, postgres=_DISPATCHES + _IN_PG)
_ROW = sql("SELECT deployment_id, run_id, message_id FROM outbound_mail WHERE id = ?")

# ``ctx.send``'s Message-ID (the dispatch id, the send's index, a domain),
# or the item's message id another deployment's run got it with.
_HEADER_ID = re.compile(r"<(dsp_[0-9a-f]{26})(?:\.\d+@[^<>\s]+|:mail:\d+)>")


class SentMail(NamedTuple):
    """A mail a run of the deployment sent: its run, its Message-ID, and its
    outbox row (None: mail to another deployment of this hub)."""

    run_id: str
    message_id: str
    row_id: str | None


def sent_mail(tx: Tx, deployment_id: str, message_ids: Sequence[str]) -> dict[str, SentMail]:
    """The mails among ``message_ids`` that runs of ``deployment_id`` sent,
    by Message-ID."""
    if not message_ids:
        return {}
    found = {
        str(mid): SentMail(str(run), str(mid), str(row))
        for mid, run, row in tx.fetch_all(_SENT_BY_ID, (deployment_id, json_array(message_ids)))
    }
    by_dispatch: dict[str, str] = {}
    for message_id in message_ids:
        if message_id not in found and (match := _HEADER_ID.fullmatch(message_id)):
            by_dispatch[match[1]] = message_id
    if by_dispatch:
        params = (deployment_id, json_array(sorted(by_dispatch)))
        for dispatch_id, run_id in tx.fetch_all(_DISPATCH_RUNS, params):
            message_id = by_dispatch[str(dispatch_id)]
            found[message_id] = SentMail(str(run_id), message_id, None)
    return found


def sent_row(tx: Tx, row_id: str) -> tuple[str, SentMail] | None:
    """The deployment and the mail of outbox row ``row_id``, if it is kept."""
    row = tx.fetch_one(_ROW, (row_id,))
    if row is None:
        return None
    deployment_id, run_id, message_id = row
    return str(deployment_id), SentMail(str(run_id), str(message_id), row_id)
