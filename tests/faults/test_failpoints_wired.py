"""Failpoints wired into hub and sidecar, fired in-process: each fault leaves
the system where docs/faults.md says it does, and it recovers from there."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest

from hub import Accepted, Acceptor, StoreUnavailable, Trigger
from hub.wire.delivery.dispatcher import DispatchConfig
from hub.wire.service import WireConfig
from runtime import (
    Backoff,
    DispatchProcessed,
    Event,
    EventsAck,
    RunEvents,
    RunStarted,
    Welcome,
    new_id,
    read_restore_record,
    write_restore_record,
)
from runtime.errors import FailpointError
from runtime.testing import CRASH_EXIT_CODE, configure_failpoints, failpoint_spent
from tests.support import REPO, wait_for
from tests.support.harnesses.sidecar import APPLIED, deployed_sidecar, mail, make_deployment
from tests.support.harnesses.wire import Hub, Sidecar, accept, deploy, refused, running_hub, served

pytestmark = pytest.mark.anyio

# Counts calls in the process (a restarted actor is a new instance, the module
# stays): the state says how often the effect happened, CALLS how often the
# handler ran.
COUNTING = """
CALLS = [0]


async def main(ctx, item):
    CALLS[0] += 1
    ctx.state["effects"] = ctx.state.get("effects", 0) + 1
    ctx.state["calls"] = CALLS[0]
"""


FAST = WireConfig(
    dispatch=DispatchConfig(request_timeout=0.2, backoff=Backoff(0.05, 0.2), census_interval=0.1)
)


@pytest.fixture(autouse=True)
def _no_failpoints() -> Iterator[None]:
    yield
    configure_failpoints("")


async def count(hub: Hub, sql: str, *params: object) -> int:
    return int((await hub.one(f"SELECT COUNT(*) AS n FROM {sql}", *params))["n"])


# --- hub ----------------------------------------------------------------------------


async def test_a_failed_accept_commit_answers_errors_never_receipts(tmp_path: Path) -> None:
    configure_failpoints("hub.accept.before_commit=1*raise")
    async with running_hub(tmp_path) as hub, anyio.create_task_group() as tg:
        dep = await deploy(hub.store)
        acceptor = Acceptor(hub.store)
        await tg.start(acceptor.run)
        trigger = Trigger(address=dep.address, subject="s", body=b"b", message_id="m1")
        with pytest.raises(StoreUnavailable):
            await acceptor.accept(trigger)
        assert await count(hub, "workflow_run_dispatch") == 0
        assert await count(hub, "workflow_run WHERE is_top_level = 1") == 0
        # The retry with the same message id is a first acceptance, at seq 1.
        receipt = await acceptor.accept(trigger)
        assert isinstance(receipt, Accepted) and not receipt.duplicate and receipt.seq == 1
        assert await count(hub, "workflow_run_dispatch") == 1
        tg.cancel_scope.cancel()


async def test_events_ingested_but_unacknowledged_are_applied_once(tmp_path: Path) -> None:
    configure_failpoints("hub.events.after_commit=1*raise")
    async with running_hub(tmp_path) as hub:
        dep = await deploy(hub.store)
        (r1,) = await accept(hub, dep, [b"m"])
        car = Sidecar(hub, dep)
        assert isinstance(await car.hello(), Welcome)
        session_id, epoch = car.session
        events: list[Event] = [
            RunStarted(event_id=new_id("evt"), run_id=r1.run_id),
            DispatchProcessed(
                event_id=new_id("evt"),
                run_id=r1.run_id,
                dispatch_id=r1.dispatch_id,
                seq=r1.seq,
                state={"n": 1},
            ),
        ]
        frame = RunEvents(
            deployment_id=dep.id, session_id=session_id, owner_epoch=epoch, events=events
        )
        assert refused(await car.request(hub.subjects.events, frame), "internal_error")
        # Committed although the sidecar was told otherwise: it resends.
        stored = await hub.all("SELECT id FROM run_event ORDER BY id")
        assert sorted(r["id"] for r in stored) == sorted(e.event_id for e in events)
        again = await car.request(hub.subjects.events, frame)
        assert isinstance(again, EventsAck) and again.ids == [e.event_id for e in events]
        assert await count(hub, "run_event") == 2
        row = await hub.one("SELECT status FROM workflow_run_dispatch WHERE id = ?", r1.dispatch_id)
        assert row["status"] == "processed"


async def test_acks_not_settled_are_delivered_again(tmp_path: Path) -> None:
    configure_failpoints("hub.dispatch.before_settle=1*raise")
    async with running_hub(tmp_path, config=FAST) as hub, anyio.create_task_group() as tg:
        _, inbox, receipts = await served(hub, tg, [b"a", b"b"])

        async def delivered() -> bool:
            return await count(hub, "workflow_run_dispatch WHERE status = 'delivered'") == 2

        await wait_for(delivered)
        # The first round's acks were never recorded: the same frames again.
        assert Counter(f.dispatch_id for f in inbox.frames) == {r.dispatch_id: 2 for r in receipts}
        tg.cancel_scope.cancel()


# --- sidecar ------------------------------------------------------------------------


async def test_a_crash_window_between_store_and_ack_ends_in_a_duplicate(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    configure_failpoints(f"sidecar.inbox.after_commit=1*pause({gate})")
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        frame = mail(dep, 1, "held")
        with pytest.raises(TimeoutError):
            await hub.deliver(frame, timeout=0.3)  # stored, but no Ack comes
        assert dep.query("SELECT dispatch_id FROM inbox") == [(frame.dispatch_id,)]
        gate.touch()
        assert (await hub.deliver(frame)).result == "duplicate"
        await hub.wait_events(DispatchProcessed, 1)
    assert dep.query("SELECT count(*) FROM inbox") == [(1,)]


async def test_the_next_events_ship_while_a_held_acknowledgement_is_written_late(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    configure_failpoints(f"sidecar.shipper.before_mark=1*pause({gate})")
    dep = make_deployment(tmp_path)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "one"))
        await wait_for(
            lambda: failpoint_spent("sidecar.shipper.before_mark"),
            what="the first ack's late write begun",
        )
        # The late write waits at the gate; mail two is stored (taking the
        # held ack with it), processed and its events acknowledged meanwhile.
        await hub.deliver(mail(dep, 2, "two"))
        await hub.wait_events(DispatchProcessed, 2)
        gate.touch()
        await wait_for(lambda: dep.query(APPLIED) == [(2, 0)], what="both acks committed")
    assert hub.of_kind(DispatchProcessed)[1].seq == 2


@pytest.mark.parametrize("point", ["sidecar.handler.after", "sidecar.run.before_commit"])
async def test_a_failure_before_the_commit_reruns_the_handler_with_one_effect(
    tmp_path: Path, point: str
) -> None:
    configure_failpoints(f"{point}=1*raise")
    dep = make_deployment(tmp_path, source=COUNTING)
    async with deployed_sidecar(dep) as (hub, _):
        assert (await hub.deliver(mail(dep, 1, "one"))).result == "stored"
        await hub.wait_events(DispatchProcessed, 1)
    (processed,) = hub.of_kind(DispatchProcessed)
    assert processed.state == {"effects": 1, "calls": 2}
    assert len(hub.of_kind(RunStarted)) == 1


# --- the restore record -------------------------------------------------------------


def test_a_failed_record_write_leaves_the_old_record_and_no_temp_file(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path)
    before = dep.record_file.read_bytes()
    record, _ = read_restore_record(dep.record_file)
    configure_failpoints("sidecar.record.before_rename=raise")
    with pytest.raises(FailpointError):
        write_restore_record(dep.record_file, msgspec.structs.replace(record, session_id="x"))
    assert dep.record_file.read_bytes() == before
    assert sorted(p.name for p in dep.record_file.parent.iterdir()) == ["deployment.json"]


CRASHING_WRITE = """
import sys
from pathlib import Path
import msgspec
from runtime import read_restore_record, write_restore_record
path = Path(sys.argv[1])
record, _ = read_restore_record(path)
write_restore_record(path, msgspec.structs.replace(record, address="new@mailrun.local"))
print("survived")
"""


async def test_a_crash_before_the_rename_keeps_the_old_record_and_boots_from_it(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path)
    before = dep.record_file.read_bytes()
    with anyio.fail_after(30):
        proc = await anyio.run_process(
            [sys.executable, "-c", CRASHING_WRITE, str(dep.record_file)],
            env={"MAILRUN_FAILPOINTS": "sidecar.record.before_rename=crash", "PATH": ""},
            cwd=REPO,
            check=False,
        )
    assert proc.returncode == CRASH_EXIT_CODE, proc.stderr
    assert b"survived" not in proc.stdout
    # The new record was written and fsynced in full, but never renamed.
    (temp,) = [p for p in dep.record_file.parent.iterdir() if p.name.endswith(".tmp")]
    assert read_restore_record(temp)[0].address == "new@mailrun.local"
    assert dep.record_file.read_bytes() == before
    async with deployed_sidecar(dep) as (hub, car):
        assert car.record is not None and car.record.address == dep.address
        assert (await hub.deliver(mail(dep, 1, "after"))).result == "stored"
        await hub.wait_events(DispatchProcessed, 1)
