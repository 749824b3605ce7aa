"""Upgrades end to end: real `mailrun up` processes on a state dir release 1 left."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tarfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec
import pytest

from runtime import read_restore_record
from tests.legacy.v1fixture import SENDER, V1Deployment, V1State, write_v1_state
from tests.support import free_port, wait_for
from tests.support.launch.starts import UP_START_TIMEOUT, started
from tests.support.sqlite import dump

from ..harness import MAILRUN, Up, mailrun, mailrun_up

pytestmark = pytest.mark.anyio

MIGRATION_FAILPOINT = "hub.migration.after_step"


def _ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _rows(path: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    db = _ro(path)
    try:
        return db.execute(sql, args).fetchall()
    except sqlite3.OperationalError:
        return []  # not migrated yet (no such table)
    finally:
        db.close()


def live(v1: V1State) -> list[V1Deployment]:
    return [d for d in v1.deployments.values() if d.live]


def deleted(v1: V1State) -> list[V1Deployment]:
    return [d for d in v1.deployments.values() if not d.live]


def sidecar_dir(state_dir: Path, dep: V1Deployment) -> Path:
    return state_dir / "sidecars" / dep.id


async def settled(up: Up, v1: V1State) -> None:
    """Wait until every live deployment has its sidecar, every accepted dispatch
    is settled at the hub, every event is acknowledged, every record rewritten,
    and every deleted deployment's directory removed."""

    unmet: list[str] = []

    def done() -> bool:
        unmet.clear()
        open_ = up.query(
            "SELECT subject, status, seq, attempts FROM workflow_run_dispatch"
            " WHERE status IN ('reserved', 'delivered') ORDER BY seq"
        )
        unowned = up.query(
            "SELECT COUNT(*) FROM deployment WHERE deleted_at IS NULL AND owner_instance IS NULL"
        )
        if open_ or unowned != [(0,)]:
            unmet.append(f"open dispatches {open_}, unowned deployments {unowned}")
            return False
        for dep in live(v1):
            inbox = dep.inbox_file(v1.state_dir)
            unacked = _rows(inbox, "SELECT COUNT(*) FROM outbox WHERE acked = 0")
            version = read_restore_record(dep.record_file(v1.state_dir))[1]
            if unacked != [(0,)] or version != 2:
                unmet.append(f"{dep.name}: unacked events {unacked}, record version {version}")
        unmet.extend(
            f"{dep.name}: its directory is still there"
            for dep in deleted(v1)
            if sidecar_dir(v1.state_dir, dep).exists()
        )
        return not unmet

    async def probe() -> bool:
        return await anyio.to_thread.run_sync(done)

    await wait_for(
        probe,
        timeout=20,
        what="every dispatch settled and every event acked",
        explain=lambda: "; ".join(unmet),
    )


Snapshot = dict[str, Any]


def snapshot(state_dir: Path, v1: V1State) -> Snapshot:
    """The durable state, without what differs between two equivalent boots
    (times, minted event ids, session and instance ids, attempt counters)."""
    hub = state_dir / "hub.db"
    out: dict[str, Any] = {
        "schema_version": _rows(hub, "SELECT version FROM schema_version"),
        "deployments": _rows(
            hub,
            "SELECT id, name, address, public_key, sources, entrypoint, next_seq, deleted_at,"
            " owner_epoch FROM deployment ORDER BY id",
        ),
        "runs": _rows(
            hub,
            "SELECT id, deployment_id, parent_run_id, is_anchor, is_top_level, status, result,"
            " error, state, last_seq FROM workflow_run ORDER BY id",
        ),
        "dispatches": _rows(
            hub,
            "SELECT id, deployment_id, run_id, seq, kind, message_id, sender, subject, body,"
            " status, CASE WHEN status = 'cancelled' THEN last_error END"
            " FROM workflow_run_dispatch ORDER BY deployment_id, seq",
        ),
        "events": _rows(
            hub, "SELECT run_id, kind, COUNT(*) FROM run_event GROUP BY 1, 2 ORDER BY 1, 2"
        ),
        "dead_letters": _rows(
            hub, "SELECT source, reason, deployment_id FROM dead_letter ORDER BY id"
        ),
    }
    for dep in deleted(v1):
        out[dep.name] = {"removed": not sidecar_dir(state_dir, dep).exists()}
    for dep in live(v1):
        inbox = dep.inbox_file(state_dir)
        record, version = read_restore_record(dep.record_file(state_dir))
        # A row release 1 left pending learns its seq only if the hub's frame
        # comes before its handler ran: either order is right (the floor in
        # the EventsAck moves the position past it; docs/sidecar.md, "Floor").
        untold = {m.dispatch_id for m in dep.mail if m.inbox_state == "pending"}
        out[dep.name] = {
            "inbox": [
                (dispatch_id, run_id, None if dispatch_id in untold else seq, state, outcome)
                for dispatch_id, run_id, seq, state, outcome in _rows(
                    inbox,
                    "SELECT dispatch_id, run_id, seq, state, outcome FROM inbox"
                    " ORDER BY dispatch_id",
                )
            ],
            "run_state": [
                (run_id, msgspec.msgpack.decode(state))
                for run_id, state in _rows(inbox, "SELECT run_id, state FROM run_state")
            ],
            "runs": _rows(inbox, "SELECT run_id, status, result, error, last_seq FROM run"),
            "meta": _rows(inbox, "SELECT value FROM meta WHERE key = 'last_seq'"),
            "record": (version, record.deployment_id, record.address, record.hub_key.seed),
        }
    return out


async def boot_once(tmp: Path, v1: V1State) -> Snapshot:
    state = tmp / "state"
    async with mailrun_up(tmp) as up:
        await settled(up, v1)
    return snapshot(state, v1)


def same(got: Snapshot, want: Snapshot) -> None:
    """Equal snapshots; on a difference, name the part that differs."""
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], key


def copy(v1: V1State, tmp: Path) -> V1State:
    shutil.copytree(v1.state_dir, tmp / "state")
    return V1State(tmp / "state", v1.deployments)


async def test_up_on_a_release_1_state_dir_carries_every_deployment_on(tmp_path: Path) -> None:
    v1 = write_v1_state(tmp_path / "state")
    idle, busy, done, gone = (v1[n] for n in ("idle", "busy", "done", "gone"))
    assert gone.record_file(v1.state_dir).is_file()  # release 1 left it behind
    async with mailrun_up(tmp_path) as up:
        listing = (await up.http.get("/workflows/deployments")).json()["deployments"]
        by_name = {d["name"]: d for d in listing}
        assert {n: d["status"] for n, d in by_name.items()} == {
            "idle": "deployed",
            "busy": "deployed",
            "done": "deployed",
            "gone": "deleted",
        }
        assert by_name["busy"]["top_level_run_id"] == busy.address
        assert by_name["idle"]["top_level_run_id"] is None

        # Delivered-pending and reserved mail: each processed once, in order,
        # on top of release 1's run state.
        expected = busy.processed + busy.waiting
        run = await up.wait_state(
            busy.address, lambda r: r["state"].get("count") == len(expected), what="v1 mail"
        )
        assert run["is_top_level"] is True and run["status"] == "running"
        assert run["state"]["seen"] == [m.seen_entry() for m in expected]

        # New mail reaches the same run, after the old.
        r = await up.send(busy.address, "after-upgrade", "new")
        assert r.status_code == 202, r.text
        assert r.json()["run_id"] == busy.address
        run = await up.wait_state(busy.address, lambda r: r["state"]["count"] == len(expected) + 1)
        assert [s["subject"] for s in run["state"]["seen"]] == [
            *(m.subject for m in expected),
            "after-upgrade",
        ]
        # A release-1 message id is still the dedupe key: an exact retry of
        # that mail (its v1 sender, subject and body) gets its first receipt.
        again = await up.send(
            busy.address, "pending-1", "pending-1 body", message_id="v1-busy-3", **{"from": SENDER}
        )
        assert again.status_code == 202 and again.json()["dispatch_id"] == expected[2].dispatch_id
        other = await up.send(busy.address, "pending-1", "pending-1 body", message_id="v1-busy-3")
        assert other.status_code == 409 and other.json()["reason"] == "message_id_reused"

        # A deployment without a run gets its first one, minted now.
        r = await up.send(idle.address, "first")
        assert r.status_code == 202, r.text
        first_run = r.json()["run_id"]
        assert first_run.startswith("run_")
        await up.wait_state(first_run, lambda r: r["state"].get("count") == 1)

        r = await up.send(done.address, "too late")
        assert r.status_code == 409 and r.json()["reason"] == "workflow_run_terminal"
        assert (await up.run(done.address))["result"] == done.result

        r = await up.send(gone.address, "hello?")
        assert r.status_code in (404, 409) and r.json()["status"] == "rejected"
        r = await up.http.get(f"/workflows/deployments/{gone.id}")
        assert r.json()["status"] == "deleted"

        await settled(up, v1)
        processed = up.query(
            "SELECT COUNT(*) FROM run_event WHERE run_id = ? AND kind = 'DispatchProcessed'",
            busy.address,
        )
        assert processed == [(len(busy.waiting) + 1,)]  # release 2 processed each once
        assert all(gone.id not in " ".join(c.cmdline()) for c in up.children())

    # Rewritten in this release's format after a successful start, key kept;
    # the deleted deployment's sidecar never started, and its directory, key
    # and mail are gone (docs/upgrades.md, "Private state").
    for dep in live(v1):
        path = dep.record_file(v1.state_dir)
        record, version = read_restore_record(path)
        assert (version, record.deployment_id, record.address) == (2, dep.id, dep.address)
        assert record.hub_key.seed == dep.seed and record.public_key == dep.public_key
        assert path.stat().st_mode & 0o777 == 0o600
    assert not sidecar_dir(v1.state_dir, gone).exists()


@pytest.fixture(scope="module")
def booted_once(tmp_path_factory: pytest.TempPathFactory) -> tuple[V1State, V1State, Snapshot]:
    """A release-1 state dir left pristine, a copy of it booted once, and the
    snapshot of that copy: what booting once ends in."""
    tmp = tmp_path_factory.mktemp("upgrade")
    v1 = write_v1_state(tmp / "v1" / "state")
    once = copy(v1, tmp / "once")
    return v1, once, anyio.run(boot_once, tmp / "once", once)


async def test_booting_twice_ends_as_booting_once(
    booted_once: tuple[V1State, V1State, Snapshot],
) -> None:
    _, once, snapshot_once = booted_once
    same(await boot_once(once.state_dir.parent, once), snapshot_once)


def _spawn_up(tmp: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    http = f"127.0.0.1:{free_port()}"
    with open(tmp / "up.log", "ab") as log:
        argv = [MAILRUN, "up", "--state-dir", str(tmp / "state"), "--http", http]
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


async def test_a_hub_killed_in_the_middle_of_the_migration_finishes_it_at_the_next_boot(
    tmp_path: Path, booted_once: tuple[V1State, V1State, Snapshot]
) -> None:
    v1, _, snapshot_once = booted_once
    state = copy(v1, tmp_path / "crashed")
    before = dump(state.state_dir / "hub.db")

    # `up` passes its environment to the hub: the failpoint kills the hub
    # (os._exit, like SIGKILL) inside migration 2's transaction, with release
    # 1's tables already dropped. `up` keeps restarting it into the same death.
    env = {**os.environ, "MAILRUN_FAILPOINTS": f"{MIGRATION_FAILPOINT}=crash"}
    proc = _spawn_up(tmp_path / "crashed", env)
    hub_log = state.state_dir / "logs" / "hub.log"
    try:

        async def crashed() -> bool:
            text = hub_log.read_text() if hub_log.exists() else ""
            return f"failpoint {MIGRATION_FAILPOINT}: crash" in text

        # Within up's start: its nats-server, then its hub's, to the migration.
        await started(
            crashed, exit_code=proc.poll, logs=[tmp_path / "crashed" / "up.log", hub_log],
            timeout=UP_START_TIMEOUT, what="the hub to die mid-migration",
        )  # fmt: skip
    finally:
        proc.terminate()
        await anyio.to_thread.run_sync(proc.wait)
    assert dump(state.state_dir / "hub.db") == before  # still release 1's, all of it

    same(await boot_once(tmp_path / "crashed", state), snapshot_once)


async def test_a_damaged_envelope_is_quarantined_and_the_others_carry_on(tmp_path: Path) -> None:
    v1 = write_v1_state(tmp_path / "state", damaged=True)
    busy = v1["busy"]
    (damaged,) = (m for m in busy.mail if m.damaged)
    async with mailrun_up(tmp_path) as up:
        await settled(up, v1)
        run = await up.run(busy.address)
        assert run["state"]["seen"] == [m.seen_entry() for m in busy.processed + busy.waiting]

        view = (await up.http.get(f"/workflows/deployments/{busy.id}")).json()
        assert view["quarantined"] == 1
        dispatch = (await up.http.get(f"/dispatches/{damaged.dispatch_id}")).json()
        assert dispatch["status"] == "cancelled"
        assert dispatch["last_error"].startswith("quarantined: unreadable inbox envelope")
        letters = up.query("SELECT source, reason, deployment_id FROM dead_letter")
        assert letters == [("quarantine", dispatch["last_error"], busy.id)]

        listing = await anyio.run_process([MAILRUN, "deployments", *up.hub_options])
        lines = listing.stdout.decode().splitlines()
        quarantined = lines[0].split().index("QUARANTINED")
        (busy_line,) = (line for line in lines if line.startswith("busy "))
        assert busy_line.split()[quarantined] == "1"

    # The sidecar kept the damaged bytes themselves, with the reason.
    kept = _rows(busy.inbox_file(v1.state_dir), "SELECT source, reason FROM dead_letter")
    assert [(s, r.split(":")[0]) for s, r in kept] == [
        (f"inbox:{damaged.dispatch_id}", "unreadable inbox envelope")
    ]


# The recorder again, in a new version that also sets a timer when told to.
_TIMED_RECORDER = """
async def main(ctx, item):
    seen = ctx.state.setdefault("seen", [])
    seen.append({"subject": item.subject, "kind": item.kind})
    ctx.state["count"] = len(seen)
    if item.subject == "later":
        ctx.set_timer("nudge", after=0.2, payload={"from": "v2"})
"""


async def _release_2_carries_on(up: Up) -> None:
    """Release 2's state (hub schema 15, inbox schema 4): its deployment gets
    the default failure policy, its run goes on from its state, a mail
    accepted once more is still a duplicate."""
    (dep,) = (await up.http.get("/workflows/deployments")).json()["deployments"]
    assert (dep["name"], dep["on_failure"], dep["max_attempts"]) == ("busy", "suspend", 5)
    runs = (await up.http.get("/runs", params={"deployment": "busy"})).json()["runs"]
    (run,) = [r for r in runs if r["is_top_level"]]
    again = await up.send(dep["address"], "m0", body="body 0", message_id="<m0@r2>")
    assert again.status_code == 202 and again.json()["run_id"] == run["id"]
    answer = await up.send(dep["address"], "m3", body="body 3")
    assert answer.status_code == 202, answer.text
    done = await up.wait_state(run["id"], lambda r: r["state"].get("count") == 4, timeout=60)
    assert [s["subject"] for s in done["state"]["seen"]] == ["m0", "m1", "m2", "m3"]
    assert done["status"] == "running"
    rows = up.query("SELECT COUNT(*) FROM workflow_run_dispatch WHERE deployment_id = ?",
                    dep["id"])  # fmt: skip
    assert rows == [(4,)]


async def _release_3_carries_on_and_keeps_timers(up: Up) -> None:
    """Release 3's state (hub schema 17, inbox schema 5: failure policies,
    before timers and steps): the store and the inbox migrate, its run goes
    on, and a new version of its code sets a timer that fires into it."""
    (dep,) = (await up.http.get("/workflows/deployments")).json()["deployments"]
    runs = (await up.http.get("/runs", params={"deployment": "busy"})).json()["runs"]
    (run,) = [r for r in runs if r["is_top_level"]]
    again = await up.send(dep["address"], "m0", body="body 0", message_id="<m0@r2>")
    assert again.status_code == 202 and again.json()["duplicate"] is True
    assert again.json()["run_id"] == run["id"]
    assert (await up.send(dep["address"], "m3", body="body 3")).status_code == 202
    await up.wait_state(run["id"], lambda r: r["state"].get("count") == 4, timeout=60)
    v2 = up.state_dir.parent / "timed.py"
    v2.write_text(_TIMED_RECORDER)
    code, out = await mailrun(up, "deploy", str(v2), "--name", "busy", "--update")
    assert code == 0, out

    async def active() -> bool:
        answer = await up.http.get(f"/workflows/deployments/{dep['id']}")
        return bool(answer.json()["version"] == 2)

    await wait_for(active, timeout=60, what="version 2 active")
    assert (await up.send(dep["address"], "later")).status_code == 202
    done = await up.wait_state(run["id"], lambda r: r["state"].get("count") == 6, timeout=60)
    assert [s["subject"] for s in done["state"]["seen"]] == [
        "m0", "m1", "m2", "m3", "later", "nudge"
    ]  # fmt: skip
    assert done["state"]["seen"][-1]["kind"] == "timer"
    assert up.query("SELECT COUNT(*) FROM timer") == [(0,)]


async def test_up_on_the_state_dirs_of_the_previous_releases_carries_their_runs_on(
    tmp_path: Path,
) -> None:
    """The state dirs the previous releases left (tests/legacy/release2-state.tar.gz
    and release3-state.tar.gz, made by tests/legacy/make_release2_state.py)
    boot under this release, side by side: each restored elsewhere is a new
    home, which its hub, just started, lets in once its recorded owner's
    lease ran out, the same wait for both."""
    checks = (
        (RELEASE_2, _release_2_carries_on),
        (RELEASE_3, _release_3_carries_on_and_keeps_timers),
    )

    async def boot(
        n: int,
        archive: Path,
        check: Callable[[Up], Awaitable[None]],
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        root = tmp_path / f"r{n}"
        with tarfile.open(archive) as tar:
            tar.extractall(root / "state", filter="data")
        async with mailrun_up(root) as up:
            # Started one after the other: each `up` takes NATS' default
            # port when it is free at its start, a free one when not.
            task_status.started()
            await check(up)

    async with anyio.create_task_group() as tg:
        for n, (archive, check) in enumerate(checks, start=2):
            await tg.start(boot, n, archive, check)


RELEASE_2 = Path(__file__).resolve().parents[2] / "legacy" / "release2-state.tar.gz"
RELEASE_3 = Path(__file__).resolve().parents[2] / "legacy" / "release3-state.tar.gz"
