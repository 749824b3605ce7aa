"""The live event stream end to end, against a real `mailrun up`: a client
that was away resumes with Last-Event-ID and misses nothing, twice nothing;
`mailrun watch` shows a processed dispatch."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import anyio
import pytest

from tests.support.events import Seen, open_stream

from ..harness import MAILRUN, mailrun_up, recorder_source

pytestmark = pytest.mark.anyio


async def test_a_client_that_was_away_gets_every_change_it_missed_once(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("orders", recorder_source())
        seen: list[Seen] = []
        async with open_stream(up.http) as events:
            start = await events.start()
            first = [(await up.send(dep["address"], f"mail {i}")).json() for i in range(2)]
            wanted = {m["dispatch_id"] for m in first}
            while wanted:  # until both are processed
                seen.append(change := await events.seen(timeout=30))
                if change[1:] in {("dispatch", d, "processed") for d in wanted}:
                    wanted.discard(change[2])
            resume = events.last_id
        assert resume is not None

        # Away: more mail comes and is processed meanwhile.
        away = [(await up.send(dep["address"], f"late {i}")).json() for i in range(3)]
        run_id = first[0]["run_id"]
        await up.wait_state(run_id, lambda r: r["state"].get("count") == 5)
        held = up.query(
            "SELECT id, kind, row_id, status FROM change WHERE id > ? ORDER BY id", start
        )
        newest = held[-1][0]
        assert newest > resume

        async with open_stream(up.http, **{"Last-Event-ID": str(resume)}) as events:
            while not seen or seen[-1][0] < newest:
                seen.append(await events.seen(timeout=30))

        # Every change after the first connection's start, in order, each once.
        assert [s[0] for s in seen] == [h[0] for h in held]
        assert seen == [tuple(h) for h in held]
        assert len(set(seen)) == len(seen)
        for receipt in away:  # and the ones it was away for, to the end
            assert ("dispatch", receipt["dispatch_id"], "processed") in {s[1:] for s in seen}


async def test_watch_prints_a_line_for_a_processed_dispatch(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("orders", recorder_source())
        async with await anyio.open_process(
            [MAILRUN, "watch", *up.hub_options], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        ) as watch:
            assert watch.stdout is not None
            receipt = (await up.send(dep["address"], "hello")).json()
            dispatch_id = receipt["dispatch_id"]
            out = ""
            try:
                with anyio.fail_after(30):
                    # The first mail may precede the stream: send again until one shows.
                    while not any(
                        "dispatch" in line and dispatch_id in line and "processed" in line
                        for line in out.splitlines()
                    ):
                        try:
                            with anyio.fail_after(2):
                                out += (await watch.stdout.receive()).decode()
                        except TimeoutError:
                            receipt = (await up.send(dep["address"], "again")).json()
                            dispatch_id = receipt["dispatch_id"]
            finally:
                watch.terminate()
        line = next(x for x in out.splitlines() if dispatch_id in x and "processed" in x)
        assert "orders" in line and "seq" in line, line


async def test_watch_with_a_refused_token_exits_1(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        wrong = tmp_path / "wrong-token"
        wrong.write_text(secrets.token_urlsafe(32))
        wrong.chmod(0o600)
        done = await anyio.run_process(
            [MAILRUN, "watch", "--hub", up.url, "--token-file", str(wrong)], check=False
        )
        assert done.returncode == 1
        assert b"unauthorized" in done.stderr, done.stderr
