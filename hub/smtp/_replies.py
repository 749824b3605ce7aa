"""The hub's refusals as SMTP replies: a code the client acts on, a text a
person reads.

The code's first digit is what matters to a client: 4 keeps the message and
tries again later, 5 gives up and bounces it to its sender. Only what may
pass by itself is a 4: the store busy or the hub stopping; a rule's refusal
(no such deployment, its run ended, a message id reused with other content,
a body too large, a sender the deployment does not take) is a 5.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from runtime import Reason

from .._errors import HubError
from ..store import Accepted, Rejected

_TRANSIENT = "451 4.3.0"
_BY_REASON = {
    Reason.UNKNOWN_ADDRESS: "550 5.1.1",
    Reason.UNKNOWN_DEPLOYMENT: "550 5.1.1",
    Reason.DEPLOYMENT_NOT_LIVE: "550 5.1.1",
    Reason.WORKFLOW_RUN_TERMINAL: "550 5.2.1",
    Reason.MESSAGE_ID_REUSED: "554 5.6.0",
    "payload_too_large": "552 5.3.4",
    "invalid_mail": "554 5.6.0",
    "sender_not_allowed": "550 5.7.1",
}
_TEXT_LIMIT = 400  # a reply line is at most 512 octets (RFC 5321 4.5.3.1.5)


class NotTaken(NamedTuple):
    """One recipient the message was not accepted for."""

    rcpt: str
    code: str  # "550 5.1.1"
    reason: str  # the hub's reason code


def outcome_reply(outcome: Rejected | HubError) -> tuple[str, str]:
    """The SMTP code and the hub's reason of a recipient's refusal."""
    reason = outcome.reason
    code = _BY_REASON.get(reason)
    if code is None:
        # A hub error that is not a rule's answer (store, shutdown, one
        # trigger that could not be written) may pass: try again.
        transient = isinstance(outcome, HubError) and outcome.http_status >= 500
        code = _TRANSIENT if transient else "554 5.0.0"
    return code, reason


def _clip(text: str) -> str:
    text = text.encode("ascii", "replace").decode()
    return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 3] + "..."


def _listed(refused: Sequence[NotTaken]) -> str:
    return ", ".join(f"<{r.rcpt}> ({r.reason})" for r in refused)


def refusal_reply(refused: Sequence[NotTaken]) -> str:
    """The answer to DATA when the message is not accepted: the first
    refusal's code, every recipient refused named."""
    code = refused[0].code
    return f"{code} {_clip('Not accepted for ' + _listed(refused))}"


def ok_reply(accepted: Sequence[Accepted]) -> str:
    """The answer to DATA when the message is accepted for every recipient."""
    if len(accepted) == 1:
        first = accepted[0]
        text = f"{'Already accepted' if first.duplicate else 'Accepted'} as {first.dispatch_id}"
    else:
        retries = sum(a.duplicate for a in accepted)
        text = f"Accepted for {len(accepted)} recipients"
        if retries:
            text += f" ({retries} already before)"
    return f"250 2.0.0 {_clip(text)}"
