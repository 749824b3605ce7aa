"""A trusted relay's verdicts: the ``Authentication-Results`` header an MTA
in front of the hub (``--smtp-trusted-relay HOST``) wrote -> a
:class:`runtime.wire.MailAuth`, source ``relay``.

The header read is the first one whose authserv-id is the relay's own
name (as given to ``--smtp-trusted-relay``), else the topmost one: the
relay adds its header above those the mail came with. Only mail whose SMTP
peer is a trusted relay is read so: anyone else's headers are the sender's
own words and are ignored (the hub checks such mail itself).
"""

from __future__ import annotations

import email.parser
import email.policy
from collections.abc import Collection
from typing import Any

from authres import AuthenticationResultsHeader

from runtime.wire import AuthVerdict, MailAuth

_HEADERS = email.parser.BytesHeaderParser(policy=email.policy.compat32)
_RESULTS = {"pass": "pass", "none": "none", "neutral": "none", "temperror": "none"}
# Where each method's result names its domain (RFC 8601 property types).
_DOMAIN_OF = {
    "spf": (("smtp", "mailfrom"), ("smtp", "helo")),
    "dkim": (("header", "d"), ("header", "i")),
    "dmarc": (("header", "from"),),
}


def _parsed(value: str) -> AuthenticationResultsHeader | None:
    try:
        return AuthenticationResultsHeader.parse(f"Authentication-Results: {value}")
    except Exception:  # a header authres cannot read: as if absent
        return None


def _verdict(result: Any, method: str) -> AuthVerdict:
    properties = {(p.type, p.name): str(p.value) for p in result.properties}
    domain = next((properties[k] for k in _DOMAIN_OF[method] if k in properties), "")
    return AuthVerdict(
        result=_RESULTS.get(result.result, "fail"),
        domain=domain.rpartition("@")[2].lower(),
        detail="" if result.result in ("pass", "none") else str(result.result),
    )


def relay_verdicts(raw: bytes, relay_ids: Collection[str]) -> MailAuth:
    """The verdicts of the relay's header in ``raw`` (every ``none`` without one)."""
    values = [str(v) for v in _HEADERS.parsebytes(raw).get_all("Authentication-Results") or []]
    headers = [h for h in map(_parsed, values) if h is not None]
    ids = {i.lower() for i in relay_ids}
    chosen = next((h for h in headers if str(h.authserv_id).lower() in ids), None)
    if chosen is None and headers:
        chosen = headers[0]
    found: dict[str, AuthVerdict] = {}
    for result in chosen.results if chosen is not None else []:
        method = str(result.method).lower()
        if method in _DOMAIN_OF and method not in found:
            found[method] = _verdict(result, method)
    return MailAuth(source="relay", **found)
