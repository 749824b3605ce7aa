"""The hub's own checks of an SMTP sender: SPF on the client's address,
MAIL FROM and HELO (pyspf), the message's DKIM signatures (dkimpy), and
DMARC, the alignment of the two with the From header's domain under its
policy record (``dmarc.py``) -> a :class:`runtime.wire.MailAuth`, source
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
import logging

import dkim
import dns.exception
import spf

from runtime.wire import AuthVerdict, MailAuth

from .dmarc import check_dmarc
from .lookups import Lookups, spf_lookups

_HEADERS = email.parser.BytesHeaderParser(policy=email.policy.compat32)
_SPF_FAIL = ("fail", "softfail", "permerror")
# dkimpy logs each signature it cannot check at ERROR; the verdict's detail
# says the same to the handler, so its log is kept for debugging only.
_DKIM_LOG = logging.getLogger("mailrun.hub.smtp.dkim")
_DKIM_LOG.setLevel(logging.CRITICAL)


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


class _DkimKeys:
    """dkimpy's ``dnsfunc`` for one message; remembers whether a lookup timed
    out (dkimpy logs that and answers "does not verify", as for a bad key)."""

    def __init__(self, lookups: Lookups) -> None:
        self._lookups = lookups
        self.timed_out = False

    def __call__(self, name: bytes, timeout: float = 5) -> bytes | None:
        try:
            return self._lookups.dkim_txt(name, timeout)
        except dns.exception.Timeout as exc:
            self.timed_out = True
            raise dkim.DnsTimeoutError(str(exc)) from None


def check_dkim(lookups: Lookups, raw: bytes) -> AuthVerdict:
    """The first DKIM signature that verifies (its ``d=``); else the first
    one's failure; ``none`` without any."""
    signatures = _HEADERS.parsebytes(raw).get_all("DKIM-Signature") or []
    if not signatures:
        return AuthVerdict(detail="no signature")
    first: AuthVerdict | None = None
    for index in range(len(signatures)):
        keys = _DkimKeys(lookups)
        verifier = dkim.DKIM(raw, logger=_DKIM_LOG)
        try:
            good = verifier.verify(idx=index, dnsfunc=keys)
            detail = "" if good else "signature does not verify"
        except Exception as exc:  # dkimpy's own errors, and what hostile input makes it raise
            good, detail = False, str(exc)[:200] or type(exc).__name__
        if keys.timed_out:
            good, detail = False, "temperror"
        domain = verifier.signature_fields.get(b"d", b"").decode("ascii", "replace").lower()
        if good:
            return AuthVerdict(result="pass", domain=domain)
        verdict = AuthVerdict(
            result="none" if detail == "temperror" else "fail", domain=domain, detail=detail
        )
        first = first or verdict
    assert first is not None
    return first


def _from_domain(raw: bytes) -> str:
    return _domain(email.utils.parseaddr(_HEADERS.parsebytes(raw).get("From", ""))[1])


def dmarc_of(
    lookups: Lookups, raw: bytes, spf_verdict: AuthVerdict, dkim_verdict: AuthVerdict
) -> AuthVerdict:
    """DMARC of the From header's domain, given the SPF and DKIM verdicts."""
    from_domain = _from_domain(raw)
    if not from_domain:
        return AuthVerdict(result="fail", detail="no From domain")
    try:
        return check_dmarc(lookups, from_domain, spf_verdict, dkim_verdict)
    except dns.exception.Timeout:
        return AuthVerdict(result="none", domain=from_domain, detail="temperror")


def verify_sender(lookups: Lookups, raw: bytes, *, ip: str, helo: str, mail_from: str) -> MailAuth:
    """Every check of one SMTP message, as the hub made it (blocking)."""
    spf_verdict = check_spf(lookups, ip, mail_from, helo)
    dkim_verdict = check_dkim(lookups, raw)
    dmarc = dmarc_of(lookups, raw, spf_verdict, dkim_verdict)
    return MailAuth(spf=spf_verdict, dkim=dkim_verdict, dmarc=dmarc, source="hub")
