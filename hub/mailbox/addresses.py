"""Mail addresses as the hub reads them: ``name+tag@domain``.

Plus-addressing: what follows the first ``+`` of the local part is the
tag, and the rest is the base address every gate checks (a deployment's
address, its allow and deny lists, the catch-all). Compared lower-cased,
as ``POST /mail`` always has.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Address:
    """One recipient: ``base`` (``name@domain``, lower case), ``tag`` (None:
    no ``+``), ``domain``, and ``written`` as it came."""

    base: str
    tag: str | None
    domain: str
    written: str


def parse_address(written: str) -> Address:
    """``written`` taken apart; an address with no ``@`` has domain ""."""
    text = written.strip()
    local, at, domain = text.rpartition("@")
    if not at:
        local, domain = text, ""
    name, plus, tag = local.partition("+")
    domain = domain.lower()
    base = f"{name.lower()}@{domain}" if at else name.lower()
    return Address(base=base, tag=tag if plus else None, domain=domain, written=text)
