"""The rollout driver: a version becomes active only once its sidecar said it
loaded it; refused with the sidecar's reason; waits for a sidecar to come."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import anyio
import pytest

from hub.store import add_version, list_versions
from runtime import Ack, AckResult, Reason, Sources, VersionLoaded, Welcome
from tests.support import wait_for
from tests.support.harnesses.wire import Hub, Inbox, Sidecar, accept, deploy, running_hub, served

pytestmark = pytest.mark.anyio

V2 = Sources(entrypoint="flow:main", files={"flow.py": "async def main(ctx, item): pass  # 2\n"})


async def statuses(hub: Hub, dep_id: str) -> list[tuple[int, str, bool, str | None]]:
    found = await hub.store.read(partial(list_versions, deployment_id=dep_id))
    return [(v.version, v.status, v.active, v.error) for v in found]


async def ask(hub: Hub, dep_id: str) -> None:
    await hub.store.transact(partial(add_version, deployment_id=dep_id, sources=V2))
    hub.wire.on_rollout(dep_id)


async def test_a_loaded_version_becomes_active_and_later_mail_carries_its_code(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        car, inbox, _ = await served(hub, tg)
        dep, welcome = car.dep, car.welcome
        assert welcome is not None
        await ask(hub, dep.id)

        async def active() -> bool:
            return (await statuses(hub, dep.id))[-1] == (2, "ready", True, None)

        await wait_for(active, what="version 2 active")
        [load] = inbox.loads
        assert (load.version, load.session_id) == (2, welcome.session_id)
        await accept(hub, dep, [b"after"])
        await wait_for(lambda: inbox.frames, what="the mail delivered")
        [frame] = inbox.frames
        assert (frame.version, frame.code) == (2, load.code)
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (VersionLoaded(version=2, error="SyntaxError: invalid syntax"), "SyntaxError"),
        # A sidecar of an earlier release does not know the frame.
        (Ack(dispatch_id="", result=AckResult.REFUSED, reason=Reason.DECODE_ERROR), "upgrade"),
    ],
)
async def test_a_version_the_sidecar_cannot_load_is_refused(
    tmp_path: Path, answer: VersionLoaded | Ack, why: str
) -> None:
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        car, inbox = Sidecar(hub, dep), Inbox(load_answer=lambda f: answer)
        await tg.start(inbox.serve, car)
        assert isinstance(await car.hello(), Welcome)
        await ask(hub, dep.id)

        async def refused() -> bool:
            return (await statuses(hub, dep.id))[-1][1] == "refused"

        await wait_for(refused, what="version 2 refused")
        [_, (version, _, active, error)] = await statuses(hub, dep.id)
        assert (version, active) == (2, False) and why in (error or "")
        await accept(hub, dep, [b"after"])
        await wait_for(lambda: inbox.frames, what="the mail delivered")
        assert inbox.frames[0].version == 1
        tg.cancel_scope.cancel()


@pytest.mark.slow  # waits for a sidecar that comes late
async def test_a_rollout_waits_for_its_sidecar(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        await ask(hub, dep.id)
        car, inbox = Sidecar(hub, dep), Inbox()
        await tg.start(inbox.serve, car)
        # No session yet: the rollout stays asked for.
        assert (await statuses(hub, dep.id))[-1] == (2, "loading", False, None)
        assert isinstance(await car.hello(), Welcome)

        async def active() -> bool:
            return (await statuses(hub, dep.id))[-1][2]

        await wait_for(active, what="version 2 active once the sidecar said hello")
        tg.cancel_scope.cancel()
