"""Faults on the wire: lost Acks and `mail.inbound` frames (F3), duplicated and
late frames and events (F5)."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from ..proxy import Frame
from ..rounds import Round


def _chance(r: Round, p: float) -> Callable[[Frame], bool]:
    """A rule condition true for a seeded fraction ``p`` of the frames."""
    return lambda frame: r.rng.random() < p


# --- F3, F5: lost, duplicated and late frames -----------------------------------------


async def f3_lost_frames(r: Round) -> None:
    p = r.rng.uniform(0.2, 0.5)
    proxy = r.sidecar.proxy
    await r.until_accepted(0.1)
    # Acks first: a lost delivery holds its whole delivery round until the
    # request times out, and no Ack would flow meanwhile to be lost.
    first = proxy.add_rule("drop", "_INBOX.>", direction="to_server", times=1)
    acks = proxy.add_rule("drop", "_INBOX.>", direction="to_server", match=_chance(r, p))
    await anyio.sleep(r.rng.uniform(0.5, 1.0))  # the fault: Acks lost for a drawn while
    inbound = proxy.add_rule(
        "drop", "mailrun.mail.inbound.>", direction="to_client", match=_chance(r, p / 2)
    )
    await anyio.sleep(r.rng.uniform(0.5, 1.0))  # ... and deliveries too
    r.over()
    for rule in (first, acks, inbound):
        proxy.remove_rule(rule)
    r.injected(first.hits > 0, "an Ack was dropped")


async def f5_duplicated_frames(r: Round) -> None:
    p = r.rng.uniform(0.2, 0.5)
    proxy = r.sidecar.proxy
    await r.until_accepted(0.1)
    # The first delivery and the first events frame are duplicated for sure.
    inbound = proxy.add_rule("duplicate", "mailrun.mail.inbound.>", direction="to_client", times=1)
    events = proxy.add_rule("duplicate", "mailrun.hub.events.*", direction="to_server", times=1)
    rules = [
        inbound,
        events,
        # Some deliveries arrive late, after their own retry and later seqs.
        proxy.add_rule(
            "delay", "mailrun.mail.inbound.>", direction="to_client",
            delay_ms=r.rng.randint(100, 400), match=_chance(r, p / 3),
        ),
        proxy.add_rule("duplicate", "mailrun.mail.inbound.>", direction="to_client",
                       match=_chance(r, p)),
        proxy.add_rule("duplicate", "mailrun.hub.events.*", direction="to_server",
                       match=_chance(r, p)),
        proxy.add_rule("duplicate", "_INBOX.>", direction="to_server", match=_chance(r, p)),
    ]  # fmt: skip
    await anyio.sleep(r.rng.uniform(1.0, 2.0))  # the fault's duration
    r.over()
    for rule in rules:
        proxy.remove_rule(rule)
    r.injected(inbound.hits > 0, "a mail.inbound frame was duplicated")
    r.injected(events.hits > 0, "an events frame was duplicated")
