"""Who sent a frame: the hub serves a request on a deployment's own subject
only under that deployment's session, and answers it only into that
deployment's inbox (docs/security.md). A session id is not a credential.

On a real server the permissions let only a deployment's identity publish on
its subjects (tests/hub/natsauth); here the in-memory bus lets anyone, so
these tests show the receiver's own checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import (
    BlobGet,
    EventsAck,
    MintChild,
    Reason,
    RunCompleted,
    RunEvents,
    StateGet,
    Welcome,
    encode,
    new_id,
)
from runtime.errors import RequestTimeout
from runtime.wire import INLINE_BODY_LIMIT
from tests.support.harnesses.wire import Hub, Sidecar, accept, deploy, refused, running_hub, send

pytestmark = pytest.mark.anyio


async def two_owned(hub: Hub) -> tuple[Sidecar, Sidecar, str]:
    """Deployments A and B, each with its sidecar welcomed on its own subjects;
    B has one mail with a claim-checked body (its run's id is returned)."""
    a, b = await deploy(hub.store, "a"), await deploy(hub.store, "b")
    (receipt,) = await accept(hub, b, [b"x" * (INLINE_BODY_LIMIT + 1)])
    cars = Sidecar(hub, a, own=True), Sidecar(hub, b, own=True)
    for car in cars:
        assert isinstance(await car.hello(), Welcome)
    return cars[0], cars[1], receipt.run_id


async def b_run(hub: Hub, run_id: str) -> tuple[str, int]:
    row = await hub.one("SELECT status, COUNT(e.id) FROM workflow_run r LEFT JOIN run_event e"
                        " ON e.run_id = r.id WHERE r.id = ?", run_id)  # fmt: skip
    return row[0], row[1]


async def test_a_sidecar_cannot_speak_for_another_deployment_with_its_session_id(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        car_a, car_b, run_b = await two_owned(hub)
        before = await b_run(hub, run_b)
        session_b, epoch_b = car_b.session
        digest = (await hub.one("SELECT body_digest FROM workflow_run_dispatch"))[0]
        forged = [
            (
                "events",
                RunEvents(
                    deployment_id=car_b.dep.id,
                    session_id=session_b,
                    owner_epoch=epoch_b,
                    events=[RunCompleted(event_id=new_id("evt"), run_id=run_b, result="forged")],
                ),
            ),
            (
                "mint",
                MintChild(
                    parent_run_id=run_b,
                    request_id="forged",
                    deployment_id=car_b.dep.id,
                    session_id=session_b,
                    owner_epoch=epoch_b,
                ),
            ),
            (
                "state",
                StateGet(deployment_id=car_b.dep.id, session_id=session_b, owner_epoch=epoch_b),
            ),
            (
                "blob",
                BlobGet(digest=digest, deployment_id=car_b.dep.id, session_id=session_b),
            ),
        ]
        for name, frame in forged:
            # On A's own subjects, with A's inbox: the sender is A, whatever B's
            # session id says. On the shared subjects of earlier releases: B's
            # session is bound to B's own subjects.
            for subjects in (car_a.subjects, hub.subjects):
                reply = await car_a.request(getattr(subjects, name), frame)
                assert refused(reply, Reason.UNKNOWN_SESSION), (name, reply)
        assert await b_run(hub, run_b) == before
        children = await hub.one("SELECT COUNT(*) FROM workflow_run WHERE parent_run_id = ?", run_b)
        assert children[0] == 0
        # B itself, on its own subjects, is served.
        done = RunCompleted(event_id=new_id("evt"), run_id=run_b, result="real")
        assert isinstance(await send(car_b, done), EventsAck)
        assert (await b_run(hub, run_b))[0] == "completed"


@pytest.mark.slow  # waits out requests left unanswered
async def test_a_request_answered_elsewhere_than_its_senders_inbox_is_not_served(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub:
        car_a, car_b, run_b = await two_owned(hub)
        before = await b_run(hub, run_b)
        session_b, epoch_b = car_b.session
        done = RunCompleted(event_id=new_id("evt"), run_id=run_b, result="forged")
        frame = RunEvents(
            deployment_id=car_b.dep.id, session_id=session_b, owner_epoch=epoch_b, events=[done]
        )
        # On B's subject (which only B's identity may publish on a real server),
        # but answered into A's inbox: served, the hub would tell A about B.
        with pytest.raises(RequestTimeout):
            await car_a.bus.request(car_b.subjects.events, encode(frame), 0.5)
        assert await b_run(hub, run_b) == before


async def test_a_hello_on_another_deployments_subject_is_refused(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        a, b = await deploy(hub.store, "a"), await deploy(hub.store, "b")
        car_b = Sidecar(hub, b, own=True)
        on_a = Sidecar(hub, a, own=True)
        hello = car_b._hello()
        reply = await on_a.request(on_a.subjects.hello, hello)
        assert refused(reply, Reason.WRONG_DEPLOYMENT)
        row = await hub.one("SELECT owner_epoch, owner_instance FROM deployment WHERE id = ?", b.id)
        assert tuple(row) == (0, None)


async def test_a_sidecar_of_an_earlier_release_keeps_the_shared_subjects(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        (receipt,) = await accept(hub, dep, [b"m"])
        old = Sidecar(hub, dep)  # shared subjects, the default inbox
        assert isinstance(await old.hello(), Welcome)
        done = RunCompleted(event_id=new_id("evt"), run_id=receipt.run_id, result=1)
        assert isinstance(await send(old, done), EventsAck)
        assert (await b_run(hub, receipt.run_id))[0] == "completed"
