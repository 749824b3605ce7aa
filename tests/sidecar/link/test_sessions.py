"""A sidecar takes a frame on its inbound subject only with a session this
process holds: the hub stamps every MailInbound and Ping with the session
it opened for it. A frame without one is not the hub's to this owner, and is
left unanswered (an answer could be taken for the owner's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import FrameDecoder, Ping, Pong, encode, new_id
from runtime.errors import RequestTimeout
from tests.support.harnesses.sidecar import deployed_sidecar, mail, make_deployment

# slow: every test waits out frames a sidecar must leave unanswered
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_a_mail_stamped_with_a_session_the_sidecar_does_not_hold_is_not_taken(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        for forged in (new_id("ses"), ""):
            with pytest.raises(RequestTimeout):
                await hub.deliver(mail(dep, 1, "forged", session_id=forged), timeout=2.5)
        assert dep.query("SELECT COUNT(*) FROM inbox") == [(0,)]
        ack = await hub.deliver(mail(dep, 1, "real"))  # stamped with its session
        assert ack.result == "stored"
        assert dep.query("SELECT COUNT(*) FROM inbox") == [(1,)]


async def test_a_probe_is_answered_only_for_the_sidecars_own_session(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        inbound = hub.subjects.inbound(dep.id)
        for forged in (new_id("ses"), ""):
            with pytest.raises(RequestTimeout):
                await hub.transport.request(inbound, encode(Ping(session_id=forged)), 1.0)
        own = Ping(session_id=hub.welcomes[-1].session_id)
        pong = FrameDecoder(Pong).decode(await hub.transport.request(inbound, encode(own), 5.0))
        assert pong.deployment_id == dep.id
