"""The hub's own checks of an SMTP sender: SPF on the client's address,
MAIL FROM and HELO (pyspf), the message's DKIM signatures (dkimpy), and
DMARC, the alignment of the two with the From header's domain under its
policy record (authheaders) -> a :class:`runtime.wire.MailAuth`, source
``hub``.

What each verdict says (``runtime.wire.VERDICTS``): ``pass``; ``fail``
(SPF's fail, softfail and permerror; a signature that does not verify; a
DMARC that fails, whatever its policy); ``none`` (no record, no signature,
SPF's neutral, and any lookup that did not answer in time: detail
``temperror``). All blocking: :func:`verify_sender` runs in a worker thread.
"""

from __future__ import annotations

import email.parser
import email.policy
import email.utils

import authheaders
import dkim
import dns.exception
import spf
from authres import AuthenticationResultsHeader, DKIMAuthenticationResult, SPFAuthenticationResult

from runtime.wire import AuthVerdict, MailAuth

from .lookups import Lookups, spf_lookups

_HEADERS = email.parser.BytesHeaderParser(policy=email.policy.compat32)
_AUTHSERV_ID = "mailrun"
_SPF_FAIL = ("fail", "softfail", "permerror")


def _domain(address: str) -> str:
    return address.rpartition("@")[2].strip().strip(">").lower()


def check_spf(lookups: Lookups, ip: str, mail_from: str, helo: str) -> AuthVerdict:
    """SPF of the envelope sender (or, for the null sender, of HELO)."""
    identity = mail_from if mail_from and mail_from != "<>" else f"postmaster@{helo}"
    domain = _domain(identity)
    with spf_lookups(lookups):
        result, _explanation = spf.check2(i=ip, s=identity, h=helo, querytime=0)
    if result == "pass":
        return AuthVerdict(result="pass", domain=domain)
    if result in _SPF_FAIL:
        return AuthVerdict(result="fail", domain=domain, detail=result)
    return AuthVerdict(result="none", domain=domain, detail=result)


def _dkim_dnsfunc(lookups: Lookups):  # type: ignore[no-untyped-def]
    def lookup(name: bytes, timeout: float = 5) -> bytes | None:
        try:
            return lookups.dkim_txt(name, timeout)
        except dns.exception.Timeout as exc:
            raise dkim.DnsTimeoutError(str(exc)) from None

    return lookup


def check_dkim(lookups: Lookups, raw: bytes) -> AuthVerdict:
    """The first DKIM signature that verifies (its ``d=``); else the first
    one's failure; ``none`` without any."""
    signatures = _HEADERS.parsebytes(raw).get_all("DKIM-Signature") or []
    if not signatures:
        return AuthVerdict(detail="no signature")
    dnsfunc = _dkim_dnsfunc(lookups)
    first: AuthVerdict | None = None
    for index in range(len(signatures)):
        verifier = dkim.DKIM(raw)
        try:
            good = verifier.verify(idx=index, dnsfunc=dnsfunc)
            detail = "" if good else "signature does not verify"
        except dkim.DnsTimeoutError:
            good, detail = False, "temperror"
        except dkim.DKIMException as exc:
            good, detail = False, str(exc)[:200]
        domain = verifier.signature_fields.get(b"d", b"").decode("ascii", "replace").lower()
        if good:
            return AuthVerdict(result="pass", domain=domain)
        verdict = AuthVerdict(
            result="none" if detail == "temperror" else "fail", domain=domain, detail=detail
        )
        first = first or verdict
    assert first is not None
    return first


def check_dmarc(
    lookups: Lookups, raw: bytes, spf_verdict: AuthVerdict, dkim_verdict: AuthVerdict
) -> AuthVerdict:
    """DMARC of the From header's domain, given the SPF and DKIM verdicts."""
    from_domain = _domain(email.utils.parseaddr(_HEADERS.parsebytes(raw).get("From", ""))[1])
    if not from_domain:
        return AuthVerdict(result="fail", detail="no From domain")
    known = []
    if spf_verdict.result == "pass":
        mail_from = f"postmaster@{spf_verdict.domain}"
        known.append(SPFAuthenticationResult(result="pass", smtp_mailfrom=mail_from))
    if dkim_verdict.result == "pass":
        known.append(DKIMAuthenticationResult(result="pass", header_d=dkim_verdict.domain))
    prev = str(AuthenticationResultsHeader(authserv_id=_AUTHSERV_ID, results=known))
    try:
        header = authheaders.authenticate_message(
            raw, _AUTHSERV_ID, prev=prev, spf=False, dkim=False, dmarc=True, dnsfunc=lookups.txt
        )
    except dns.exception.Timeout:
        return AuthVerdict(result="none", domain=from_domain, detail="temperror")
    for result in AuthenticationResultsHeader.parse(header).results:
        if result.method == "dmarc":
            verdict = {"pass": "pass", "none": "none"}.get(result.result, "fail")
            policy = next((p.value for p in result.properties if p.name == "policy"), "")
            return AuthVerdict(result=verdict, domain=from_domain, detail=policy or result.result)
    return AuthVerdict(domain=from_domain)


def verify_sender(lookups: Lookups, raw: bytes, *, ip: str, helo: str, mail_from: str) -> MailAuth:
    """Every check of one SMTP message, as the hub made it (blocking)."""
    spf_verdict = check_spf(lookups, ip, mail_from, helo)
    dkim_verdict = check_dkim(lookups, raw)
    dmarc = check_dmarc(lookups, raw, spf_verdict, dkim_verdict)
    return MailAuth(spf=spf_verdict, dkim=dkim_verdict, dmarc=dmarc, source="hub")
