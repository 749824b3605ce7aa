"""A sidecar process dies while the hub's acknowledgement of its events is
held for the inbox's next transaction, and again right after the store
that transaction was: nothing is lost, nothing is done twice, and the
outbox settles."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from runtime import DispatchProcessed, TransportError, open_nats
from runtime.testing import CRASH_EXIT_CODE, FAILPOINTS_ENV
from tests.sidecar.test_process import exited, sidecar_process
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.sidecar import fake_hub_on, mail, make_deployment
from tests.support.launch.starts import SIDECAR_START_TIMEOUT

# slow: three `python -m sidecar` processes in turn
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

COUNTING = """
async def main(ctx, item):
    ctx.state["effects"] = ctx.state.get("effects", 0) + 1
    ctx.state.setdefault("subjects", []).append(item.subject)
"""


async def test_a_kill_with_an_ack_held_and_after_the_store_it_rode_on_loses_nothing(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    dep = make_deployment(tmp_path / "state", source=COUNTING)
    args = ("--state-dir", str(dep.state_dir), "--nats", nats_server.url)
    async with (
        open_nats(nats_server.url, name="fake hub") as transport,
        fake_hub_on(transport, dep) as hub,
    ):
        # The first process: mail one processed and acknowledged; the
        # acknowledgement held, no transaction comes to take it, and the
        # process dies as it is about to write it alone.
        env = {FAILPOINTS_ENV: "sidecar.shipper.before_mark=1*crash"}
        with sidecar_process(*args, log=tmp_path / "first.log", env=env) as proc:
            await wait_for(lambda: len(hub.welcomes) == 1, timeout=SIDECAR_START_TIMEOUT)
            one = mail(dep, 1, "one")
            assert (await hub.deliver(one)).result == "stored"
            await hub.wait_events(DispatchProcessed, 1)
            assert await exited(proc) == CRASH_EXIT_CODE
        acknowledged = set(hub.events)
        kept = {r[0] for r in dep.query("SELECT event_id FROM outbox")}
        assert kept == acknowledged  # held, never written

        # The second: it sends them again (the hub has them: no second
        # effect) and holds their new acknowledgement; mail two's store
        # commits and the process dies before it answers.
        env = {FAILPOINTS_ENV: "sidecar.inbox.after_commit=1*crash"}
        with sidecar_process(*args, log=tmp_path / "second.log", env=env) as proc:
            await wait_for(lambda: len(hub.welcomes) == 2, timeout=SIDECAR_START_TIMEOUT)
            await wait_for(lambda: hub.batches == 2, what="the held events sent again")
            assert set(hub.frames[1]) == acknowledged
            two = mail(dep, 2, "two")
            with pytest.raises(TransportError):  # no answer: a timeout, or no responders
                await hub.deliver(two, timeout=2.0)
            assert await exited(proc) == CRASH_EXIT_CODE
        assert dep.query("SELECT dispatch_id, state FROM inbox ORDER BY seq") == [
            (one.dispatch_id, "done"),
            (two.dispatch_id, "pending"),
        ]

        # The third: mail two again is a duplicate, processed once; every
        # acknowledgement ends up written.
        with sidecar_process(*args, log=tmp_path / "third.log") as proc:
            await wait_for(lambda: len(hub.welcomes) == 3, timeout=SIDECAR_START_TIMEOUT)
            assert (await hub.deliver(two)).result == "duplicate"
            await hub.wait_events(DispatchProcessed, 2)
            await wait_for(
                lambda: dep.query("SELECT count(*) FROM outbox") == [(0,)],
                what="every acknowledgement written",
            )
            proc.send_signal(signal.SIGTERM)
            assert await exited(proc) == 0
    processed = hub.of_kind(DispatchProcessed)
    assert sorted(p.dispatch_id for p in processed) == sorted([one.dispatch_id, two.dispatch_id])
    last = max(processed, key=lambda p: p.seq)
    assert last.state == {"effects": 2, "subjects": ["one", "two"]}
    assert dep.query("SELECT state, length(envelope) FROM inbox ORDER BY seq") == [
        ("done", 0),
        ("done", 0),
    ]
