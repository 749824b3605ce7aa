"""DMARC (RFC 7489) over the SPF and DKIM verdicts the hub already has: the
From domain's policy record, and whether a passing SPF or DKIM domain
aligns with the From domain (relaxed: the same organizational domain;
strict, ``aspf=s`` / ``adkim=s``: the same domain).

The organizational domain is authheaders' (``get_org_domain``, over the
public suffix list it ships), but for a domain whose suffix that list does
not know (``.test``, a TLD newer than the list): there authheaders answers
the bare TLD, which would align every domain under it with every other;
the list's own default rule (``*``) makes it the last two labels instead.
"""

from __future__ import annotations

from authheaders.dmarc_lookup import get_org_domain

from runtime.wire import AuthVerdict

from .lookups import Lookups


def org_domain(domain: str) -> str:
    """The organizational domain of ``domain`` (lower case)."""
    domain = domain.lower().rstrip(".")
    try:
        org = str(get_org_domain(domain)).lower()
    except Exception:  # a name the list's code cannot take apart
        org = ""
    if "." not in org:
        org = ".".join(domain.split(".")[-2:])
    return org


def _record(lookups: Lookups, domain: str) -> dict[str, str] | None:
    """The DMARC record at ``_dmarc.<domain>``, as its tags; None: none, or
    more than one (RFC 7489 6.6.3: as if none)."""
    texts = [
        b"".join(r.strings).decode("utf-8", "replace")
        for r in lookups.answers(f"_dmarc.{domain}", "TXT")
    ]
    records = [t for t in texts if t.replace(" ", "").lower().startswith("v=dmarc1")]
    if len(records) != 1:
        return None
    tags: dict[str, str] = {}
    for part in records[0].split(";"):
        name, equals, value = part.partition("=")
        if equals:
            tags[name.strip().lower()] = value.strip().lower()
    return tags


def _aligned(verdict: AuthVerdict, from_domain: str, mode: str) -> bool:
    if verdict.result != "pass" or not verdict.domain:
        return False
    if mode == "s":
        return verdict.domain == from_domain
    return org_domain(verdict.domain) == org_domain(from_domain)


def check_dmarc(
    lookups: Lookups, from_domain: str, spf: AuthVerdict, dkim: AuthVerdict
) -> AuthVerdict:
    """The DMARC verdict of a mail whose From header's domain is
    ``from_domain``; ``dns.exception.Timeout`` when a lookup did not answer."""
    record = _record(lookups, from_domain)
    organization = org_domain(from_domain)
    if record is None and organization != from_domain:
        record = _record(lookups, organization)
        if record is not None and "sp" in record:
            record["p"] = record["sp"]  # a subdomain's policy
    if record is None:
        return AuthVerdict(result="none", domain=from_domain)
    policy = record.get("p", "")
    if policy not in ("none", "quarantine", "reject"):
        return AuthVerdict(result="fail", domain=from_domain, detail="permerror")
    if _aligned(spf, from_domain, record.get("aspf", "r")) or _aligned(
        dkim, from_domain, record.get("adkim", "r")
    ):
        return AuthVerdict(result="pass", domain=from_domain)
    return AuthVerdict(result="fail", domain=from_domain, detail=f"p={policy}")
