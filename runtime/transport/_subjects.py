"""NATS subject grammar: dot-separated tokens; ``*`` matches one, ``>`` the rest."""

from __future__ import annotations

from ..errors import TransportError


def validate_subject(subject: str, *, wildcards: bool) -> None:
    """Raise :class:`TransportError` unless ``subject`` is a valid NATS subject.

    Publishing needs a literal subject (``wildcards=False``); a subscription
    may use ``*`` tokens and a final ``>`` token.
    """
    tokens = subject.split(".")
    for index, token in enumerate(tokens):
        if not token or any(c.isspace() for c in token):
            raise TransportError(f"invalid subject {subject!r}")
        if "*" in token or ">" in token:
            if not wildcards:
                raise TransportError(f"wildcards are not allowed here: {subject!r}")
            if len(token) > 1 or (token == ">" and index != len(tokens) - 1):
                raise TransportError(f"misplaced wildcard in {subject!r}")


def subject_matches(pattern: str, subject: str) -> bool:
    """True when the literal ``subject`` falls under the subscription ``pattern``."""
    want = pattern.split(".")
    have = subject.split(".")
    for index, token in enumerate(want):
        if token == ">":
            return len(have) > index
        if index >= len(have) or (token != "*" and token != have[index]):
            return False
    return len(want) == len(have)
