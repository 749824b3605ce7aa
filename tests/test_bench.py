"""The benchmarks still run (tiny counts; the figures belong to bench/suite.py)."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import anyio
import psutil
import pytest

from bench.mail.dbos_peer import NOT_INSTALLED
from runtime.config import DEFAULT_RUN_HISTORY
from tests.support import REPO, wait_for

# slow: every test runs a benchmark script, most of them starting `mailrun up`
pytestmark = pytest.mark.slow

# What a bench that starts `mailrun up` several times may take on a loaded
# two-core machine (above the suite's 120 s); its test waits a minute longer.
BENCH_BOUND = 240


def run_bench(
    script: str, *args: str, env: dict[str, str] | None = None, timeout: float = 100
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def bench(script: str, *args: str, timeout: float = 100) -> dict[str, object]:
    out = run_bench(script, *args, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    figures: dict[str, object] = json.loads(out.stdout)
    return figures


def test_the_reference_hand_off_moves_every_message() -> None:
    figures = bench("mail/reference.py", "--messages", "300", "--in-flight", "8")
    assert figures["messages"] == 300
    assert isinstance(figures["per_s"], float) and figures["per_s"] > 0
    # Two rows a message on A, in fewer transactions than rows: grouped.
    rows = figures["rows_per_transaction_a"]
    assert isinstance(rows, float) and rows > 1


def test_the_e2e_bench_sends_through_the_nats_ingress() -> None:
    figures = bench("mail/bench_e2e.py", "--mails", "60", "--senders", "2", "--nats")
    assert (figures["mails"], figures["batch"], figures["nats"]) == (60, 100, True)
    assert figures["up_exit_code"] == 0
    assert isinstance(figures["processed_per_s"], float) and figures["processed_per_s"] > 0
    # One ingress batch of 60, accepted together: the lane takes them in
    # frames of many (the hub's GET /metrics counts them).
    assert figures["mails_a_frame"] > 1


def test_the_e2e_bench_spreads_an_open_loop_over_deployments() -> None:
    figures = bench("mail/bench_e2e.py", "--mails", "40", "--deployments", "2", "--rate", "200")
    assert (figures["mails"], figures["deployments"], figures["offered_per_s"]) == (40, 2, 200)
    assert figures["up_exit_code"] == 0
    cpu = figures["cpu_ms_per_mail"]
    assert isinstance(cpu, dict) and cpu["hub"] > 0 and cpu["sidecar"] > 0
    assert figures["mails_a_frame"] >= 1


@pytest.mark.timeout(BENCH_BOUND + 60)
def test_the_e2e_bench_wakes_deployments_asleep_at_the_start() -> None:
    args = ["--mails", "30", "--senders", "4", "--deployments", "3", "--idle-stop", "0.3"]
    figures = bench("mail/bench_e2e.py", *args, "--max-awake", "2", timeout=BENCH_BOUND)
    assert (figures["mails"], figures["deployments"], figures["up_exit_code"]) == (30, 3, 0)
    assert (figures["idle_stop"], figures["max_awake"]) == (0.3, 2)
    # Every deployment was asleep when the clock started: each mailed one was
    # woken, a new process, and never more at once than --max-awake.
    assert isinstance(figures["sidecars_started"], int) and figures["sidecars_started"] >= 3
    assert figures["most_awake"] in (1, 2)
    cpu = figures["cpu_ms_per_mail"]
    assert isinstance(cpu, dict) and cpu["sidecar"] > 0


def test_the_fan_out_bench_waits_for_every_child() -> None:
    figures = bench("mail/fan_out.py", "--children", "3", "--rounds", "1")
    assert (figures["children"], figures["rounds"]) == (3, 1)
    seconds = figures["seconds"]
    assert isinstance(seconds, float) and seconds >= 1.0  # each child awaits 1 s


def test_the_dbos_peer_says_so_when_dbos_is_not_installed(tmp_path: Path) -> None:
    # A dbos that fails to import stands for the missing extra, installed or not.
    (tmp_path / "dbos.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    out = run_bench("mail/dbos_peer.py", "--workflows", "5", env=env)
    assert out.returncode == NOT_INSTALLED, out.stderr[-3000:]
    assert out.stdout == ""
    assert out.stderr.splitlines() == ["dbos is not installed: pip install -e '.[bench]'"]


@pytest.mark.skipif(find_spec("dbos") is None, reason="the bench extra (dbos) is not installed")
def test_the_dbos_peer_completes_every_workflow() -> None:
    figures = bench("mail/dbos_peer.py", "--workflows", "20", "--concurrency", "4", "--steps", "2")
    assert (figures["workflows"], figures["concurrency"], figures["steps"]) == (20, 4, 2)
    assert figures["journal_mode"] == "wal"
    # DBOS's own records: the 20 and the warm-up succeeded, each with its two steps.
    assert (figures["succeeded"], figures["step_outputs"]) == (21, 42)
    assert isinstance(figures["workflows_per_s"], float) and figures["workflows_per_s"] > 0


def test_the_http_server_bench_measures_every_installed_server() -> None:
    figures = bench("parts/http_servers.py", "--requests", "200", "--senders", "4")
    assert "uvicorn httptools, uvloop, bare ASGI" in figures
    granian = find_spec("granian") is not None
    uvicorn = find_spec("uvicorn") is not None and find_spec("h11") is not None
    for name, got in figures.items():
        if (name.startswith("granian") and not granian) or (
            name.startswith("uvicorn") and not uvicorn
        ):
            assert got is None
            continue
        assert isinstance(got, dict), name
        # Every request was answered 202 (the bench raises otherwise); 200
        # requests may take less CPU than the clock ticks of a process.
        assert got["per_s"] > 0 and got["cpu_ms"] >= 0, name


def test_the_store_bench_accepts_and_ingests_every_mail() -> None:
    figures = bench("store/hub_store.py", "--rows", "300", "--batch", "60", "--message-ids")
    assert (figures["rows"], figures["message_ids"]) == (300, True)
    fifths = figures["accept_us_per_mail"]
    assert isinstance(fifths, list) and [f["rows"] for f in fifths] == [60, 120, 180, 240, 300]
    assert all(f["us"] > 0 for f in fifths)
    assert isinstance(figures["ingest_us_per_mail"], float) and figures["ingest_us_per_mail"] > 0
    assert figures["events_whole"] == DEFAULT_RUN_HISTORY  # frames of 70: trimmed at each


def test_the_store_bench_ingests_lone_frames_trimmed_a_quarter_at_a_time() -> None:
    figures = bench("store/hub_store.py", "--rows", "61", "--batch", "61", "--frame", "1")
    assert (figures["rows"], figures["frame"]) == (61, 1)
    # 61 steps, trimmed at each fourth: the run holds its 16 latest and the
    # one past the last trim (at step 60).
    assert figures["events_whole"] == DEFAULT_RUN_HISTORY + 1


def test_the_trigger_bench_measures_each_way_of_writing() -> None:
    # The script itself exits non-zero when a row or a change went missing.
    figures = bench("store/trigger_statements.py", "--rows", "400", "--repeat", "1")
    cases = figures["cases"]
    assert isinstance(cases, list)
    assert [(c["statements"], c["triggers"]) for c in cases] == [
        ("executemany", False), ("executemany", True),
        ("groups of 32", False), ("groups of 32", True),
        ("hub.store.sql", False), ("hub.store.sql", True),
    ]  # fmt: skip
    assert all(c["insert_us"] > 0 and c["update_us"] > 0 for c in cases)


def test_the_lane_bench_posts_every_mail() -> None:
    figures = bench("parts/mail_lane.py", "--mails", "64", "--senders", "4", "--message-ids")
    assert (figures["mails"], figures["message_ids"]) == (64, True)
    assert isinstance(figures["per_s"], float) and figures["per_s"] > 0
    assert isinstance(figures["loop_us_per_mail"], float) and figures["loop_us_per_mail"] > 0


def test_the_gil_bench_times_a_transaction_each_way() -> None:
    figures = bench("store/gil_handoff.py", "--rows", "5", "--transactions", "3")
    assert (figures["rows"], figures["transactions"]) == (5, 3)
    for key in ("thread_alone_ms", "thread_beside_python_ms", "calling_thread_ms"):
        assert isinstance(figures[key], float) and figures[key] > 0


def test_the_timer_bench_sees_each_timer_once_in_each_runs_order() -> None:
    # The script itself exits non-zero when a timer was missed, doubled or out of order.
    figures = bench("mail/timers.py", "--runs", "3", "--timers", "4", "--lead", "2")
    assert (figures["runs"], figures["timers"]) == (3, 12)
    assert figures["exactly_once"] and figures["in_order"] and figures["armed_before_due"]
    fired, handled = figures["fire_lateness"], figures["due_to_handler"]
    assert isinstance(fired, dict) and isinstance(handled, dict)
    assert 0 <= fired["max_ms"] <= handled["max_ms"]  # never fired early; handled after firing


def test_the_lone_mail_bench_sees_each_mail_once_and_prices_it() -> None:
    # The script itself exits non-zero when a mail was missed or seen twice.
    figures = bench(
        "mail/lone_mail.py", "--mails", "8", "--rate", "100", "--deployments", "2", "--idle", "0.2"
    )
    assert (figures["mails"], figures["deployments"], figures["exactly_once"]) == (8, 2, True)
    idle = figures["idle_cpu_ms_per_s"]
    assert isinstance(idle, dict) and set(idle) == {"hub", "sidecar"}
    latency = figures["post_to_handler"]
    assert isinstance(latency, dict) and 0 < latency["p50_ms"] <= latency["max_ms"]
    assert figures["processes_priced"] == {"hub": 1, "sidecar": 2}
    # On-CPU time in nanoseconds (schedstat), not 10 ms ticks: eight mails
    # cost each side something, and no side more than a mail's whole wait.
    for role in ("hub", "sidecar"):
        spent = figures[f"{role}_cpu_ms_per_mail"]
        assert isinstance(spent, float) and 0 < spent < 1000
        ticked = figures[f"{role}_user_sys_ms_per_mail"]
        assert isinstance(ticked, list) and len(ticked) == 2 and min(ticked) >= 0
        sched = figures["schedstat_per_mail"][role]
        # Each mail put both sides' threads on a CPU at least once.
        assert sched["cpu_ms"] == spent and sched["runs"] >= 1 and sched["waited_ms"] >= 0


def test_the_floor_bench_handles_every_mail_and_prices_both_sides() -> None:
    # The script exits non-zero unless its handler saw every mail.
    figures = bench("mail/floor.py", "--mails", "60", "--rate", "300")
    assert (figures["mails"], figures["all_handled"]) == (60, True)
    spent = figures["cpu_ms_per_mail"]
    assert isinstance(spent, dict) and set(spent) == {"hub", "sidecar"}
    # CPU times come in clock ticks (10 ms): each side's can round to 0, not both.
    assert all(isinstance(ms, float) and ms >= 0 for ms in spent.values())
    assert sum(spent.values()) > 0


def test_the_idle_timer_bench_times_each_timer_alone() -> None:
    figures = bench("mail/timers.py", "--idle", "--repeat", "2")
    assert (figures["runs"], figures["timers"], figures["idle"]) == (1, 2, True)
    assert figures["exactly_once"] and figures["in_order"]
    fired = figures["fire_lateness"]
    assert isinstance(fired, dict) and 0 <= fired["p50_ms"] <= fired["max_ms"]


@pytest.mark.timeout(BENCH_BOUND + 60)
def test_the_wake_bench_wakes_every_asleep_deployment_once() -> None:
    # Three `mailrun up` in turn; the script exits non-zero when a mail was
    # missed or handled twice.
    args = ["--deployments", "2", "--storm", "3", "--storm-max-awake", "2"]
    args += ["--many", "3", "--hour", "1", "--many-max-awake", "2", "--idle-stop", "0.3"]
    figures = bench("wakes/wake.py", *args, timeout=BENCH_BOUND)
    latency, storm, many = figures["latency"], figures["storm"], figures["many"]
    assert isinstance(latency, dict) and isinstance(storm, dict) and isinstance(many, dict)
    assert latency["exactly_once"] and storm["exactly_once"] and many["exactly_once"]
    assert 0 < latency["post_to_handler"]["p50_ms"] <= latency["post_to_handler"]["max_ms"]
    # The slots held: never more sidecar processes than --max-awake.
    assert 1 <= storm["most_awake"] <= 2 and 1 <= many["most_awake"] <= 2
    assert many["hub_rss_mib"] > 0  # the hub was found and sampled


def test_the_up_poll_bench_prices_polls_that_keep_every_deployment_admitted() -> None:
    figures = bench("wakes/up_poll.py", "--deployments", "20", "--polls", "10")
    assert (figures["deployments"], figures["polls"], figures["admitted"]) == (20, 10, 20)
    rounds = figures["rounds_ms"]
    assert isinstance(rounds, list) and len(rounds) == 5


def test_the_workflow_load_bench_leaves_the_sources_and_their_bytecode() -> None:
    figures = bench("wakes/workflow_load.py", "--files", "2", "--starts", "3")
    assert (figures["files"], figures["starts"]) == (2, 3)
    left = figures["left_on_disk"]
    assert isinstance(left, list)
    assert {"src/flow.py", "src/helper0.py", ".src.sources"} <= set(left)
    assert sum(name.startswith("src/__pycache__/") for name in left) == 2


def test_the_boot_bench_starts_the_asleep_sidecar_and_prices_each_start() -> None:
    # The script exits non-zero unless each start handled its mail once and fell asleep.
    # A workflow of some size (--lines): its module must still load and run.
    figures = bench("wakes/boot.py", "--starts", "2", "--idle-stop", "0.3", "--lines", "60")
    assert figures["starts"] == 2 and figures["exactly_once"]
    assert figures["exit_codes"] == [5, 5, 5]  # SidecarExit.ASLEEP, the first start's too
    wall, cpu = figures["wall"], figures["cpu"]
    assert isinstance(wall, dict) and isinstance(cpu, dict)
    # Restored, then welcomed: two lines of the log, timed as the bench reads
    # them, in order. The handler stamps its own time, which a loaded reader
    # can read the welcome's line after: each milestone is seen, no order.
    assert 0 < wall["to_restored"]["p50_ms"] <= wall["to_welcomed"]["p50_ms"]
    assert wall["to_handled"]["p50_ms"] > 0
    # The CPU up to the handler's call is part of the whole life's.
    assert 0 < cpu["cpu_to_handled"]["p50_ms"] <= cpu["cpu_life"]["p90_ms"]


def test_the_join_bench_welcomes_every_join_and_grants_every_sleep() -> None:
    # The script exits non-zero unless every join was welcomed and every Sleep granted.
    figures = bench(
        "wakes/hub_join.py", "--deployments", "3", "--rounds", "2", "--again", "--idle", "0.2"
    )
    assert figures["joins"] == 6 and figures["all_granted"]
    wall = figures["wall_ms"]
    assert isinstance(wall, dict)
    assert set(wall) == {"hello_to_welcome", "again_to_welcome", "sleep_to_asleep"}
    assert all(spread["p50"] > 0 for spread in wall.values())


def test_the_up_restarts_bench_meets_no_refusal_and_every_mail_once() -> None:
    # The script exits non-zero unless every mail was processed exactly once.
    figures = bench("hubs/up_restarts.py", "--kills", "1", "--every", "1", "--rate", "20")
    requests = figures["requests"]
    assert isinstance(requests, dict) and requests["answered"] == figures["mails"]
    # up holds the hub's port while it restarts: a sender waits, never refused.
    assert "refused at connect" not in requests, requests
    assert figures["processed"] == figures["mails"] and figures["kills"] == 1


def test_the_cycle_bench_prices_a_real_sidecars_cycles() -> None:
    # It prints text, not JSON: one line a cycle kind, from the real process's schedstat.
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "parts" / "cycle.py"),
            "--cycles",
            "5",
            "--cpu",
            "--only",
        ],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    spent = {
        line.split(":")[0]: float(line.split(": ")[1].split()[0])
        for line in out.stdout.splitlines()
        if "of the sidecar's CPU a cycle" in line
    }
    assert set(spent) == {"lone mail", "2-mail cycle"} and min(spent.values()) > 0


SCRIPTS = sorted(
    path.relative_to(REPO).as_posix()
    for path in (REPO / "bench").rglob("*.py")
    if not path.name.startswith("_")
)
"""Every bench script, by the path its command names (a room's package and helpers left out)."""


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_starts_from_the_repositorys_root(script: str) -> None:
    # As the docs write its command, without the tests' PYTHONPATH: a script
    # finds the repository (tests.support, the other scripts) from its own path.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, script, "--help"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith(f"usage: {Path(script).name} "), out.stdout[:300]


def _dead(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE  # dead, not yet reaped by its new parent
    except psutil.NoSuchProcess:
        return True


@pytest.mark.anyio
async def test_a_bench_killed_at_its_timeout_leaves_no_fleet_behind() -> None:
    # A bench's caller (a test's timeout) SIGKILLs it: its `mailrun up`, and so
    # every process up runs, must go with it, not eat the CPU of what runs next.
    script = str(REPO / "bench" / "mail" / "lone_mail.py")
    argv = [sys.executable, script, "--mails", "100000", "--json"]
    async with await anyio.open_process(argv, stdout=subprocess.DEVNULL) as bench_proc:
        me = psutil.Process(bench_proc.pid)

        def up_started() -> list[psutil.Process]:
            return [p for p in me.children(recursive=True) if "up" in p.cmdline()]

        fleet = await wait_for(up_started, timeout=60, what="the bench's `mailrun up`")
        fleet += fleet[0].children(recursive=True)
        bench_proc.kill()
        await bench_proc.wait()
        await wait_for(lambda: all(map(_dead, fleet)), timeout=30, what="up and its children gone")


def test_sidecar_starts_reads_a_start_and_its_welcome_from_the_logs(tmp_path: Path) -> None:
    logs = tmp_path / "state" / "logs"
    logs.mkdir(parents=True)
    log = logs / "sidecar-dep_a.log"
    log.write_text("")  # born now: its first start
    born = os.stat(log).st_mtime
    stamp = datetime.datetime.fromtimestamp(born + 3.0).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    log.write_text(
        f"{stamp} INFO mailrun.sidecar: deployment dep_a restored\n"
        f"{stamp} INFO mailrun.sidecar.link: session ses_1 (epoch 1, hub boot boot_1)\n"
    )
    (logs / "sidecar-dep_b.log").write_text("never welcomed\n")
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "wakes" / "sidecar_starts.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    first = done.stdout.splitlines()[0]
    assert first.startswith("first starts: 1 welcomed, 1 never"), done.stdout
    assert "max 3.0" in first or "max 2.99" in first, done.stdout
