"""Control frames (Ping, Fenced, LoadVersion) have a task of their own: a
rollout, which fetches a version's sources and imports user code, never
holds the deployment's mail."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest

from runtime import (
    DispatchProcessed,
    FrameDecoder,
    LoadVersion,
    Ping,
    Sources,
    VersionLoaded,
    encode,
    new_id,
)
from sidecar.link._control import MAILBOX
from tests.support import wait_for
from tests.support.harnesses.sidecar import deployed_sidecar, mail, make_deployment

pytestmark = pytest.mark.anyio

# Its import waits for a gate file: a rollout whose import takes as long as
# the test likes (within a deadline, so a sidecar that waits for it fails
# the test instead of hanging it).
GATED = """
import os
import time

_until = time.monotonic() + 20
while not os.path.exists({gate!r}):
    if time.monotonic() > _until:
        raise RuntimeError("the gate never opened")
    time.sleep(0.01)


async def main(ctx, item):
    ctx.state["version"] = 2
"""


async def test_mail_is_stored_and_processed_while_a_version_imports(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dep = make_deployment(tmp_path / "state")
    gate = tmp_path / "gate"
    sources = Sources(entrypoint="flow:main", files={"flow.py": GATED.format(gate=str(gate))})
    answers: list[VersionLoaded] = []
    async with deployed_sidecar(dep) as (hub, _):
        load = LoadVersion(
            session_id=hub.welcomes[-1].session_id,
            version=2,
            code=hub.claim(msgspec.json.encode(sources)),
        )

        inbound = hub.subjects.inbound(dep.id)

        async def roll_out() -> None:
            reply = await hub.transport.request(inbound, encode(load), 30.0)
            answers.append(FrameDecoder(VersionLoaded).decode(reply))

        async with anyio.create_task_group() as tg:
            tg.start_soon(roll_out)
            # Fetched and written: the import has begun, and waits at the gate.
            written = dep.record_file.parent / "versions" / "2" / "flow.py"
            await wait_for(written.exists, what="version 2's sources written")
            # More control frames than the mailbox holds meanwhile: dropped,
            # never waited for (the probes name no session of its own).
            for _ in range(MAILBOX + 4):
                await hub.transport.publish(inbound, encode(Ping(session_id=new_id("ses"))))
            for seq in (1, 2, 3):
                assert (await hub.deliver(mail(dep, seq, f"during {seq}"))).result == "stored"
            await hub.wait_events(DispatchProcessed, 3)
            assert answers == []  # the load still waits at the gate
            gate.touch()
            await wait_for(lambda: answers, what="the answer to LoadVersion")
    assert answers == [VersionLoaded(deployment_id=dep.id, version=2, error="")]
    assert dep.query("SELECT version FROM version") == [(2,)]
    dropped = [r for r in caplog.records if "dropping a Ping" in r.getMessage()]
    assert len(dropped) >= 4
