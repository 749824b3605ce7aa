"""``mailrun demo``: the whole system once, end to end, in a temporary dir.

It runs ``up`` in-process (nats-server, hub and sidecar as real child
processes on free ports), deploys the bundled counter example, mails it,
follows the run over HTTP until it completes, and stops everything.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
import msgspec

from runtime import RunStatus, is_terminal, unwrap_group
from runtime.config import LOOPBACK

from ..._client import AsyncHubClient
from ..._errors import DemoFailed as DemoFailed  # the CLI catches it from here
from ..._errors import DemoTimeout, HubError
from ...up import UpSettings, free_port, run_up

EXAMPLE = "counter.py"
ENTRYPOINT = "counter:main"
SUBJECTS = ("hello", "how are you", "one more", "stop")
DEADLINE = 60.0


def example_source() -> str:
    """The counter example's text (read, never imported: it is the user's code)."""
    return resources.files("hub._examples").joinpath(EXAMPLE).read_text(encoding="utf-8")


def _compact(value: object) -> str:
    return msgspec.json.encode(value).decode()


def _processed(run: dict[str, Any]) -> int:
    # The counter keeps its count in the run state the hub mirrors; ``last_seq``
    # (the last dispatch the hub saw processed) says the same for one run.
    state = run.get("state")
    if isinstance(state, dict) and isinstance(state.get("count"), int):
        return int(state["count"])
    return int(run.get("last_seq") or 0)


Advance = Callable[[int, str], None]
"""``advance(done, note)``: ``done`` mails processed; ``note`` says how the run stands."""


async def _drive(
    client: AsyncHubClient, say: Callable[[str], None], advance: Advance
) -> dict[str, Any]:
    dep = await client.deploy("counter", example_source(), ENTRYPOINT)
    say(f"deployed {dep['name']} ({dep['id']}) at {dep['address']}")
    # One mail at a time, each followed until processed, so every step of the
    # round trip (accept, deliver, handle, report back) shows. The polls have
    # no deadline of their own: run_demo's bounds the whole demo.
    run: dict[str, Any] = {}
    for n, subject in enumerate(SUBJECTS, start=1):
        receipt = await client.send_mail(dep["address"], subject, b"")
        say(f"sent {subject!r}: {receipt['status']} as {receipt['dispatch_id']}")
        while True:
            run = await client.run(receipt["run_id"])
            if _processed(run) >= n:
                break
            await anyio.sleep(0.05)
        advance(n, f"run {run['id']} is {run['status']}")
    while not is_terminal(str(run.get("status"))):
        await anyio.sleep(0.05)
        run = await client.run(run["id"])
    return run


async def _demo_in_up(
    config: UpSettings, say: Callable[[str], None], advance: Advance
) -> dict[str, Any]:
    try:
        async with anyio.create_task_group() as tg:
            say(f"starting nats-server, hub and sidecars in {config.state_dir}")
            info = await tg.start(run_up, config)
            say(f"hub {info.http}, nats {info.nats_url}")
            async with AsyncHubClient(info.http, timeout=5.0, token=info.admin_token) as client:
                run = await _drive(client, say, advance)
            tg.cancel_scope.cancel()
        return run
    except ExceptionGroup as group:
        # The first failure is the story; any other followed from it.
        raise unwrap_group(group.exceptions[0]) from None


async def run_demo(
    say: Callable[[str], None],
    *,
    environ: Mapping[str, str],
    advance: Advance | None = None,
    deadline: float = DEADLINE,
    ports: range | None = None,
) -> dict[str, Any]:
    """Run the demo; the completed run's JSON. ``DemoFailed`` if it does not
    complete within ``deadline`` seconds (the state dir is then kept for its logs).
    Each mail processed goes to ``advance`` (default: a line to ``say``);
    ``environ`` is what the processes it starts inherit; its HTTP and NATS
    ports are free ones of ``ports`` (``--ports``)."""

    def said(done: int, note: str) -> None:
        say(f"processed {done} of {len(SUBJECTS)}: {note}")

    tmp = Path(tempfile.mkdtemp(prefix="mailrun-demo-"))
    http_port = free_port(within=ports)
    config = UpSettings(
        state_dir=tmp / "state",
        http=f"{LOOPBACK}:{http_port}",
        nats_port=free_port(within=ports, avoid={http_port}),
        stop_grace=3.0,
        say=say,
        environ=environ,
    )
    logs = config.state_dir / "logs"
    keep = False  # only a failure keeps the state dir: its logs tell why
    try:
        try:
            with anyio.fail_after(deadline):
                run = await _demo_in_up(config, say, advance or said)
        except HubError as exc:
            keep = True
            raise DemoFailed(f"{exc}; logs in {logs}") from exc
        except TimeoutError:
            keep = True
            raise DemoTimeout(f"no result within {deadline:g} s; logs in {logs}") from None
        if run.get("status") != RunStatus.COMPLETED:
            keep = True
            error = _compact(run.get("error"))
            raise DemoFailed(f"the run ended {run.get('status')}: {error}; logs in {logs}")
        say(f"run {run['id']} completed with {_compact(run.get('result'))}")
        return run
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
