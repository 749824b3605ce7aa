"""Ids: a prefix and 26 lowercase hex digits (104 random bits)."""

from __future__ import annotations

import re
import secrets

PREFIXES = ("dep", "run", "dsp", "ses", "evt", "apr", "ins", "boot", "out", "prd", "hub", "sch")
_ID = re.compile(r"^(?P<prefix>[a-z]+)_[0-9a-f]{26}$")


def new_id(prefix: str) -> str:
    """Return a fresh id such as ``run_3f2a...`` (26 hex digits = 104 bits)."""
    if prefix not in PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}")
    return f"{prefix}_{secrets.token_hex(13)}"


def is_id(value: object, prefix: str) -> bool:
    """True when ``value`` is a well-formed id with this prefix."""
    if not isinstance(value, str):
        return False
    m = _ID.match(value)
    return m is not None and m.group("prefix") == prefix
