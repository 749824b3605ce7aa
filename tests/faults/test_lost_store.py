"""A stored batch's commit does not wait for the disk (its step's commit
does): a sidecar whose machine loses the file's unsynced tail loses the
envelopes stored since its last durable commit, which it had acknowledged
as stored. The hub sends such a dispatch again after its redelivery bound,
and it is processed once.

The loss is made as a power failure leaves it: the sidecar dies (a crash
at a failpoint) between the store and the handler, and its inbox files are
put back as they were at its last durable commit."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import msgspec
import pytest

from hub.wire.delivery.dispatcher import DispatchConfig
from hub.wire.service import WireConfig
from runtime import Backoff, open_nats
from runtime.testing import CRASH_EXIT_CODE, FAILPOINTS_ENV
from tests.sidecar.test_process import exited, sidecar_process
from tests.support import NatsServerProcess, wait_for
from tests.support.harnesses.sidecar import Deployment
from tests.support.harnesses.wire import accept, joined, running_hub
from tests.support.launch.starts import SIDECAR_FIRST_MAIL_TIMEOUT, SIDECAR_START_TIMEOUT

# slow: three `python -m sidecar` processes in turn against a hub
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

COUNTING = """
async def main(ctx, item):
    ctx.state["effects"] = ctx.state.get("effects", 0) + 1
    ctx.state.setdefault("subjects", []).append(item.subject)
"""

FAST = WireConfig(
    dispatch=DispatchConfig(
        request_timeout=1.0, backoff=Backoff(0.05, 0.2), census_interval=0.1, redeliver_after=1.0
    )
)


def _inbox_files(dep: Deployment) -> list[Path]:
    inbox = dep.state_dir / "workflow-runs" / dep.id / "inbox.db"
    return [inbox.with_name(inbox.name + suffix) for suffix in ("", "-wal", "-shm")]


async def test_a_stored_envelope_lost_with_the_unsynced_tail_comes_again_and_runs_once(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with (
        open_nats(nats_server.url, name="hub") as bus,
        running_hub(tmp_path, transport=bus, config=FAST) as hub,
    ):
        dep, wired = await joined(hub, nats_server.url, tmp_path / "sidecar", COUNTING)
        args = ("--state-dir", str(dep.state_dir), "--nats", nats_server.url)

        def inbox() -> list[tuple[int, str]]:
            return [(r[0], r[1]) for r in dep.query("SELECT seq, state FROM inbox ORDER BY seq")]

        # Mail one processed, its events settled: the last durable commit.
        def in_session() -> bool:
            return hub.wire.sessions.current(dep.id) is not None

        with sidecar_process(*args, log=tmp_path / "first.log") as proc:
            await wait_for(in_session, timeout=SIDECAR_START_TIMEOUT, what="a session")
            await accept(hub, wired, [b"one"])
            await wait_for(lambda: inbox() == [(1, "done")], timeout=10, what="one done")
            proc.send_signal(signal.SIGTERM)
            assert await exited(proc) == 0
        synced = tmp_path / "synced"
        synced.mkdir()
        kept = [f for f in _inbox_files(dep) if f.exists()]
        for f in kept:
            shutil.copy2(f, synced / f.name)

        # Mail two stored and acknowledged; the process dies before its handler.
        env = {FAILPOINTS_ENV: "sidecar.handler.before=1*crash"}
        with sidecar_process(*args, log=tmp_path / "second.log", env=env) as proc:
            await wait_for(in_session, timeout=SIDECAR_START_TIMEOUT, what="a session")
            await accept(hub, wired, [b"two"])
            assert await exited(proc, timeout=10) == CRASH_EXIT_CODE
        assert inbox() == [(1, "done"), (2, "pending")]
        # Acknowledged as stored: the Ack goes out before the scheduler is woken.

        # The power failure: the files as the disk held them at the last fsync.
        for f in _inbox_files(dep):
            f.unlink(missing_ok=True)
        for f in kept:
            shutil.copy2(synced / f.name, f)
        assert inbox() == [(1, "done")]

        # The hub sends mail two again after its bound; processed once.
        with sidecar_process(*args, log=tmp_path / "third.log") as proc:
            await wait_for(
                lambda: inbox() == [(1, "done"), (2, "done")],
                timeout=SIDECAR_FIRST_MAIL_TIMEOUT,
                what="two done",
            )
            proc.send_signal(signal.SIGTERM)
            assert await exited(proc) == 0
        (raw,) = dep.query("SELECT state FROM run_state")
        assert msgspec.msgpack.decode(raw[0]) == {"effects": 2, "subjects": ["m0", "m0"]}
