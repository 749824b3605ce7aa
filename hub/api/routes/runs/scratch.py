"""The scratch process of a replay: ``python -m sidecar.replay``, started by
module name (the hub never imports sidecar code), fed one job on stdin,
answering with one report on stdout (docs/replay.md).

It runs the new code as the hub's user: not a sandbox. What it gets is a
sidecar's environment without the NATS URL and without the variables the
operator passes to sidecars (``MAILRUN_SIDECAR_PASS_ENV``), a temporary
directory as working directory and ``HOME``, a bound in time (killed past
it, or when the request is cancelled), and bounded pipes.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import anyio
import msgspec
from anyio.abc import ByteReceiveStream

from hub._errors import ReplayFailed
from hub.store import RunHistory
from runtime import (
    NATS_URL_ENV,
    ReplayFailureReport,
    ReplayJob,
    ReplayReport,
    Sources,
    python_m,
    sidecar_env,
)
from runtime.sidecar_contract import SIDECAR_PASS_ENV

REPLAY_TIMEOUT = 120.0
"""Seconds a whole replay may take."""
_MAX_ANSWER = 64 * 1024 * 1024  # a report holds two states, or two items' effects
_STDERR_TAIL = 4096


def replay_job(history: RunHistory, sources: Sources) -> ReplayJob:
    """What the scratch process reads: ``history`` through ``sources``."""
    return ReplayJob(
        files=sources.files,
        entrypoint=sources.entrypoint,
        deployment_id=history.deployment_id,
        run_id=history.run_id,
        start_state=history.start_state,
        start=history.start,
        items=history.items,
        skipped=history.skipped,
        address=history.address,
    )


def scratch_env(environ: Mapping[str, str], home: Path) -> dict[str, str]:
    """A sidecar's environment, less what lets code reach out on the
    operator's behalf: the NATS URL (it may hold a password) and the
    variables passed to sidecars on purpose (API keys)."""
    env = sidecar_env({k: v for k, v in environ.items() if k != SIDECAR_PASS_ENV}, home=home)
    env.pop(NATS_URL_ENV, None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


async def run_scratch(
    job: ReplayJob, environ: Mapping[str, str], *, timeout: float = REPLAY_TIMEOUT
) -> ReplayReport:
    """Replay ``job`` in a scratch process, with a sidecar's share of
    ``environ`` (the hub's environment at its start); its report.

    Raises :class:`ReplayFailed` when the code does not load, the process
    crashes or answers nothing usable, or it runs past ``timeout`` seconds."""
    cwd = Path(await anyio.to_thread.run_sync(tempfile.mkdtemp, "", "mailrun-replay-"))
    try:
        env = scratch_env(environ, cwd)
        code, out, err = await _run(msgspec.json.encode(job), cwd, env, timeout)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(shutil.rmtree, cwd, True)
    tail = err[-_STDERR_TAIL:].decode("utf-8", errors="replace").strip()
    if code == 0:
        try:
            return msgspec.json.decode(out, type=ReplayReport)
        except msgspec.DecodeError as exc:
            raise ReplayFailed(f"the replay answered no report ({exc}): {tail}") from None
    try:
        failure = msgspec.json.decode(out, type=ReplayFailureReport)
    except msgspec.DecodeError:
        raise ReplayFailed(f"the replay process exited with status {code}: {tail}") from None
    raise ReplayFailed(f"{failure.error}: {failure.detail}")


async def _run(
    job: bytes, cwd: Path, env: Mapping[str, str], timeout: float
) -> tuple[int, bytes, bytes]:
    out = bytearray()
    err = bytearray()
    try:
        with anyio.fail_after(timeout):
            # Leaving the block kills the process if it still runs (on a
            # timeout or a cancelled request), then reaps it.
            async with (
                await anyio.open_process(
                    python_m("sidecar.replay"),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=cwd,
                    env=env,
                ) as process,
                anyio.create_task_group() as tg,
            ):
                assert process.stdin and process.stdout and process.stderr
                tg.start_soon(_read, process.stdout, out, _MAX_ANSWER)
                tg.start_soon(_read, process.stderr, err, None)
                try:
                    await process.stdin.send(job)
                    await process.stdin.aclose()
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass  # it ended before it read the job: its status and stderr say why
                code = await process.wait()
    except TimeoutError:
        tail = err[-_STDERR_TAIL:].decode("utf-8", errors="replace").strip()
        raise ReplayFailed(f"the replay did not end within {timeout:g} s: {tail}") from None
    return code, bytes(out), bytes(err)


async def _read(stream: ByteReceiveStream, into: bytearray, limit: int | None) -> None:
    """Read ``stream`` to its end: the first ``limit`` bytes (all with None),
    else only the stderr tail is worth keeping."""
    async for chunk in stream:
        if limit is None:
            into += chunk
            del into[: max(0, len(into) - _STDERR_TAIL)]
        elif len(into) < limit:
            into += chunk[: limit - len(into)]
