"""Who owns a deployment (hub/wire/sessions/ownership.py), on a real SQLite file:
incarnations of one home, copies, takeover, adoption after the lease,
deletion, the hub's state for a new owner, and the races each fence closes
(failpoint pause gates, never sleeps)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from hub import delete_deployment
from hub.store import OwnerRow
from hub.wire.service import WireConfig
from hub.wire.sessions.ownership import OneAtATime, OwnerClaim, decide
from runtime import (
    DispatchProcessed,
    EventsAck,
    Hello,
    MintChild,
    Minted,
    Refused,
    RunStarted,
    RunStates,
    StateGet,
    Welcome,
    new_id,
)
from runtime.testing import configure_failpoints
from tests.support import wait_for
from tests.support.harnesses.wire import (
    Hub,
    Inbox,
    Sidecar,
    accept,
    deploy,
    refused,
    running_hub,
    send,
)

pytestmark = pytest.mark.anyio

HOME_A = "home_" + "a" * 26
HOME_B = "home_" + "b" * 26


@pytest.fixture(autouse=True)
def _no_failpoints() -> Iterator[None]:
    yield
    configure_failpoints("")


def reached(gate: Path) -> Callable[[], bool]:
    """A party stopped at the pause gate ``gate`` (runtime/failpoints.py)."""
    return lambda: gate.with_name(gate.name + ".reached").exists()


async def owner(hub: Hub, dep_id: str) -> tuple[str | None, str | None, int]:
    row = await hub.one(
        "SELECT owner_instance, owner_home, owner_epoch FROM deployment WHERE id = ?", dep_id
    )
    return row["owner_instance"], row["owner_home"], row["owner_epoch"]


async def processed(car: Sidecar, run_id: str, dispatch_id: str, seq: int, n: int) -> object:
    return await send(
        car,
        RunStarted(event_id=new_id("evt"), run_id=run_id),
        DispatchProcessed(
            event_id=new_id("evt"), run_id=run_id, dispatch_id=dispatch_id, seq=seq, state={"n": n}
        ),
    )


async def test_a_restart_in_the_owners_home_takes_over_at_once(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        first = Sidecar(hub, dep, home=HOME_A)
        one = await first.hello()
        assert isinstance(one, Welcome) and one.owner_epoch == 1 and not one.from_hub
        # The owner saying hello again (hub restart, reconnect) keeps its epoch.
        again = await first.hello()
        assert isinstance(again, Welcome) and again.owner_epoch == 1
        # A new process in the same home: its lock proves the old one is gone.
        restarted = Sidecar(hub, dep, home=HOME_A)
        two = await restarted.hello()
        assert isinstance(two, Welcome) and two.owner_epoch == 2 and not two.from_hub
        assert await owner(hub, dep.id) == (restarted.instance_id, HOME_A, 2)
        # The previous incarnation is fenced.
        fenced = await send(first, RunStarted(event_id=new_id("evt"), run_id="r"))
        assert refused(fenced, "stale_epoch")


async def test_a_copy_is_refused_while_the_owner_lives(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        assert isinstance(await Sidecar(hub, dep, home=HOME_A).hello(), Welcome)
        copy = Sidecar(hub, dep, home=HOME_B)
        assert refused(await copy.hello(), "owner_conflict")
        assert (await owner(hub, dep.id))[1:] == (HOME_A, 1)


async def test_a_restart_in_the_same_home_is_welcomed_without_a_notice(
    tmp_path: Path,
) -> None:
    # Its home's lock proves the previous process gone: a Fenced notice would
    # reach only the new process (a restart, a wake), and cost it a hello.
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        first = Sidecar(hub, dep, home=HOME_A)
        assert isinstance(await first.hello(), Welcome)
        again, inbox = Sidecar(hub, dep, home=HOME_A), Inbox()
        await tg.start(inbox.serve, again)
        welcome = await again.hello()
        assert isinstance(welcome, Welcome) and welcome.owner_epoch == 2
        assert await owner(hub, dep.id) == (again.instance_id, HOME_A, 2)
        # A takeover's notice comes after any the restart would have sent.
        assert isinstance(await Sidecar(hub, dep, home=HOME_B).hello(takeover=True), Welcome)
        await wait_for(lambda: inbox.notices)
        assert [(n.owner_epoch, n.reason) for n in inbox.notices] == [(3, "owner_conflict")]
        tg.cancel_scope.cancel()


async def test_takeover_moves_ownership_fences_the_old_owner_and_tells_it(
    tmp_path: Path,
) -> None:
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        (r1,) = await accept(hub, dep, [b"m1"])
        old, old_inbox = Sidecar(hub, dep, home=HOME_A), Inbox()
        await tg.start(old_inbox.serve, old)
        assert isinstance(await old.hello(), Welcome)
        new = Sidecar(hub, dep, home=HOME_B)
        taken = await new.hello(takeover=True)
        assert isinstance(taken, Welcome) and taken.owner_epoch == 2 and taken.from_hub
        assert await owner(hub, dep.id) == (new.instance_id, HOME_B, 2)
        await wait_for(lambda: [(n.owner_epoch, n.reason) for n in old_inbox.notices])
        assert [(n.owner_epoch, n.reason) for n in old_inbox.notices] == [(2, "owner_conflict")]
        # Nothing the old owner sends is applied; its hello is refused.
        assert refused(await processed(old, r1.run_id, r1.dispatch_id, 1, 99), "stale_epoch")
        assert refused(await old.hello(), "owner_conflict")
        row = await hub.one("SELECT state, last_seq FROM workflow_run WHERE id = ?", r1.run_id)
        assert (row["state"], row["last_seq"]) == ("{}", 0)
        tg.cancel_scope.cancel()


@pytest.mark.slow  # waits out an owner's lease
async def test_any_home_adopts_once_the_owner_is_silent_past_its_lease(tmp_path: Path) -> None:
    async with running_hub(tmp_path, config=WireConfig(owner_lease=0.3)) as hub:
        dep = await deploy(hub.store)
        assert isinstance(await Sidecar(hub, dep, home=HOME_A).hello(), Welcome)
        copy = Sidecar(hub, dep, home=HOME_B)

        async def adopted() -> Welcome | None:
            reply = await copy.hello()
            return reply if isinstance(reply, Welcome) else None

        welcome = await wait_for(adopted, what="the silent owner's lease to run out")
        assert welcome.owner_epoch == 2 and welcome.from_hub


async def test_the_hub_state_pages_every_run_for_the_new_owner_only(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        (r1,) = await accept(hub, dep, [b"m1"])
        old = Sidecar(hub, dep, home=HOME_A)
        assert isinstance(await old.hello(), Welcome)
        assert isinstance(await processed(old, r1.run_id, r1.dispatch_id, 1, 3), EventsAck)
        new = Sidecar(hub, dep, home=HOME_B)
        taken = await new.hello(takeover=True)
        assert isinstance(taken, Welcome)
        get = StateGet(
            deployment_id=dep.id, session_id=taken.session_id, owner_epoch=taken.owner_epoch
        )
        states = await new.request(hub.subjects.state, get)
        assert isinstance(states, RunStates) and not states.more
        [run] = states.runs
        assert (run.run_id, run.status, run.state, run.last_seq) == (
            r1.run_id,
            "running",
            {"n": 3},
            1,
        )
        assert states.floor_seq == 1
        # The fenced owner reads nothing.
        assert old.welcome is not None
        stale = StateGet(
            deployment_id=dep.id,
            session_id=old.welcome.session_id,
            owner_epoch=old.welcome.owner_epoch,
        )
        assert refused(await old.request(hub.subjects.state, stale), "stale_epoch")


async def test_delete_fences_the_owner_in_the_same_step(tmp_path: Path) -> None:
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        (r1,) = await accept(hub, dep, [b"m1"])
        car, inbox = Sidecar(hub, dep, home=HOME_A), Inbox()
        await tg.start(inbox.serve, car)
        assert isinstance(await car.hello(), Welcome)
        assert await delete_deployment(hub.store, dep.id)
        hub.wire.on_deleted(dep.id)
        await wait_for(lambda: [n.reason for n in inbox.notices] == ["deployment_not_live"])
        assert hub.wire.sessions.current(dep.id) is None
        # Its sessions are forgotten: every frame of them is refused.
        assert refused(await processed(car, r1.run_id, r1.dispatch_id, 1, 1), "unknown_session")
        hello = Hello(deployment_id=dep.id, instance_id=car.instance_id, public_key=dep.public_key)
        assert refused(await car.request(hub.subjects.hello, hello), "deployment_not_live")
        instance, _, epoch = await owner(hub, dep.id)
        assert (instance, epoch) == (None, 2)
        row = await hub.one("SELECT state FROM workflow_run WHERE id = ?", r1.run_id)
        assert row["state"] == "{}"
        tg.cancel_scope.cancel()


# --- races: each fence, with a pause gate where the other party lands ---------------


async def test_a_deletion_between_an_adoptions_read_and_its_claim_claims_nothing(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        configure_failpoints(f"hub.hello.before_claim=1*pause({gate})")
        car = Sidecar(hub, dep, home=HOME_A)
        replies: list[object] = []

        async def hello() -> None:
            replies.append(await car.hello())

        tg.start_soon(hello)
        # The hello read a live deployment and verified the key; now it waits.
        await wait_for(reached(gate))
        assert not replies
        assert await delete_deployment(hub.store, dep.id)
        gate.touch()
        await wait_for(lambda: replies)
        assert refused(replies[0], "deployment_not_live")
        assert await owner(hub, dep.id) == (None, None, 1)
        assert hub.wire.sessions.current(dep.id) is None


async def test_a_copys_claim_waits_for_a_takeovers_session_and_is_refused(
    tmp_path: Path,
) -> None:
    # The copy's claim would snapshot the owner's liveness while the
    # takeover's transaction is in flight, find the new owner not live, and
    # be welcomed over it (two homes welcomed, at epochs 2 and 3).
    gate = tmp_path / "gate"
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        assert isinstance(await Sidecar(hub, dep, home=HOME_A).hello(), Welcome)
        configure_failpoints(f"hub.hello.before_session=1*pause({gate})")
        taker, copy = Sidecar(hub, dep, home=HOME_B), Sidecar(hub, dep, home="home_" + "c" * 26)
        taken: list[object] = []
        copied: list[object] = []

        async def take() -> None:
            taken.append(await taker.hello(takeover=True))

        async def hello() -> None:
            copied.append(await copy.hello())

        tg.start_soon(take)
        await wait_for(reached(gate))  # epoch 2 committed, its session not open
        assert await owner(hub, dep.id) == (taker.instance_id, HOME_B, 2)
        tg.start_soon(hello)
        # The copy's claim waits for the takeover's to end: no answer meanwhile.
        with anyio.move_on_after(1.0):
            await wait_for(lambda: copied, timeout=math.inf, what="the copy's answer")
        assert not copied, copied
        gate.touch()
        await wait_for(lambda: taken and copied)
        assert isinstance(taken[0], Welcome) and taken[0].owner_epoch == 2
        assert refused(copied[0], "owner_conflict")
        assert await owner(hub, dep.id) == (taker.instance_id, HOME_B, 2)
        current = hub.wire.sessions.current(dep.id)
        assert current is not None and current.instance_id == taker.instance_id


async def test_a_deletion_between_a_spawns_admission_and_the_childs_creation_creates_nothing(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        (r1,) = await accept(hub, dep, [b"m1"])
        car = Sidecar(hub, dep, home=HOME_A)
        welcome = await car.hello()
        assert isinstance(welcome, Welcome)
        configure_failpoints(f"hub.mint.before_claim=1*pause({gate})")
        replies: list[object] = []

        async def mint() -> None:
            ask = MintChild(
                parent_run_id=r1.run_id,
                request_id="spawn-1",
                deployment_id=dep.id,
                session_id=welcome.session_id,
                owner_epoch=welcome.owner_epoch,
            )
            replies.append(await car.request(hub.subjects.mint, ask))

        tg.start_soon(mint)
        await wait_for(reached(gate))
        assert not replies
        assert await delete_deployment(hub.store, dep.id)
        gate.touch()
        await wait_for(lambda: replies)
        assert not isinstance(replies[0], Minted)
        children = await hub.one(
            "SELECT COUNT(*) AS n FROM workflow_run WHERE parent_run_id = ?", r1.run_id
        )
        assert children["n"] == 0


async def test_a_takeover_racing_a_delivery_round_leaves_nothing_delivered_to_the_old_owner(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        await accept(hub, dep, [b"a", b"b"])
        configure_failpoints(f"hub.dispatch.before_settle=1*pause({gate})")
        old, old_inbox = Sidecar(hub, dep, home=HOME_A), Inbox()
        await tg.start(old_inbox.serve, old)
        assert isinstance(await old.hello(), Welcome)
        # The old owner stored both; the round holds their acks, unrecorded.
        await wait_for(lambda: len(old_inbox.frames) == 2)
        new, new_inbox = Sidecar(hub, dep, home=HOME_B), Inbox()
        await tg.start(new_inbox.serve, new)
        taken = await new.hello(takeover=True)
        assert isinstance(taken, Welcome)
        gate.touch()
        # The old owner's acks do not count: the new owner gets both, in order.
        await wait_for(lambda: [f.seq for f in new_inbox.frames if f.owner_epoch == 2] == [1, 2])

        async def delivered() -> bool:
            rows = await hub.all(
                "SELECT status FROM workflow_run_dispatch WHERE deployment_id = ?", dep.id
            )
            return [r["status"] for r in rows] == ["delivered", "delivered"]

        await wait_for(delivered)
        tg.cancel_scope.cancel()


def test_a_hello_from_another_home_asks_again_while_the_owner_is_unconfirmed() -> None:
    """Just after a hub restart its recorded owner may still say hello: a
    hello from another home (a copy, or a state dir restored elsewhere) is
    told to ask again, which a sidecar retries; once the owner has been
    heard from (or the window passed), the answer is final."""
    row = OwnerRow("pk", "ins_owner", HOME_A, 3, None, "deployed")
    hello = Hello(deployment_id="dep_x", instance_id="ins_copy", public_key="pk", home=HOME_B)
    waiting = decide(row, hello, owner_live=True, unconfirmed=True)
    assert isinstance(waiting, Refused) and waiting.reason == "owner_unconfirmed"
    final = decide(row, hello, owner_live=True)
    assert isinstance(final, Refused) and final.reason == "owner_conflict"
    claim = decide(row, hello, owner_live=False)
    assert isinstance(claim, OwnerClaim) and (claim.owner_epoch, claim.from_hub) == (4, True)


async def test_claims_of_one_deployment_take_turns_and_leave_no_lock_behind() -> None:
    claims, order = OneAtATime(), []
    first_in, let_go = anyio.Event(), anyio.Event()

    async def claim(dep: str, name: str, hold: anyio.Event | None = None) -> None:
        async with claims.one(dep):
            order.append(f"{name} in")
            if hold is not None:
                first_in.set()
                await hold.wait()
            order.append(f"{name} out")

    async with anyio.create_task_group() as tg:
        tg.start_soon(claim, "dep_a", "a1", let_go)
        await first_in.wait()
        tg.start_soon(claim, "dep_a", "a2")
        await claim("dep_b", "b")  # another deployment does not wait
        assert order == ["a1 in", "b in", "b out"]
        let_go.set()
    assert order == ["a1 in", "b in", "b out", "a1 out", "a2 in", "a2 out"]
    assert len(claims) == 0
    # A claim cancelled while it waits leaves nothing behind either.
    async with anyio.create_task_group() as tg:
        first_in, let_go = anyio.Event(), anyio.Event()
        tg.start_soon(claim, "dep_a", "c1", let_go)
        await first_in.wait()
        with anyio.move_on_after(0.05):
            await claim("dep_a", "c2")
        let_go.set()
    assert len(claims) == 0 and "c2 in" not in order
