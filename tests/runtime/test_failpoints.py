"""Failpoints: parsing, the registry of names, each action, hit counts, zero config."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from runtime import afailpoint
from runtime.errors import FailpointError, FailpointSpecError
from runtime.failpoints import REGISTERED, failpoint
from runtime.testing import CRASH_EXIT_CODE, configure_failpoints, failpoint_spent
from tests.support import REPO

# Registered names, used here as any name would be.
A, B, S, P = (
    "hub.accept.before_commit",
    "hub.events.after_commit",
    "sidecar.handler.after",
    "sidecar.run.before_commit",
)


@pytest.fixture(autouse=True)
def _reset() -> object:
    yield
    configure_failpoints("")


def test_unset_failpoints_do_nothing() -> None:
    configure_failpoints("")
    failpoint(A)


@pytest.mark.parametrize(
    "spec",
    [A, f"{A}=explode", f"{A}=sleep", f"{A}=sleep(abc)", f"{A}=pause", "=crash", f"{A}=crash(1"],
)
def test_malformed_specs_are_refused(spec: str) -> None:
    with pytest.raises(FailpointSpecError):
        configure_failpoints(spec)


@pytest.mark.parametrize("name", ["hub.accept.before_comit", "sidecar.handler", "x"])
def test_a_name_no_failpoint_has_is_refused(name: str) -> None:
    configure_failpoints(f"{A}=raise")
    with pytest.raises(FailpointSpecError, match=f"unknown failpoint '{name}'"):
        configure_failpoints(f"{name}=crash")
    with pytest.raises(FailpointError):  # the ones armed before stay armed
        failpoint(A)


def _used_in_the_code() -> dict[str, str]:
    """Every failpoint name the code passes as a literal, and its module."""
    used: dict[str, str] = {}
    for package in ("runtime", "hub", "sidecar"):
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                names = [
                    *(node.args[:1] if called in ("failpoint", "afailpoint") else []),
                    *(k.value for k in node.keywords if k.arg == "failpoint_name"),
                ]
                for arg in names:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        used[arg.value] = str(path.relative_to(REPO))
    return used


def test_the_registry_names_every_failpoint_in_the_code_and_no_other() -> None:
    assert _used_in_the_code() == dict(REGISTERED)


def test_the_docs_list_every_registered_failpoint() -> None:
    faults = (REPO / "docs" / "faults.md").read_text()
    assert [name for name in REGISTERED if f"| `{name}` |" not in faults] == []


def test_raise_fires_only_the_given_number_of_times() -> None:
    configure_failpoints(f"{A}=2*raise; {B}=sleep(1)")
    for _ in range(2):
        assert not failpoint_spent(A)
        with pytest.raises(FailpointError, match=A.replace(".", r"\.")):
            failpoint(A)
    assert failpoint_spent(A) and not failpoint_spent(S)
    failpoint(A)
    failpoint(S)


def test_sleep_blocks_for_the_given_milliseconds() -> None:
    configure_failpoints(f"{S}=sleep(30)")
    began = time.monotonic()
    failpoint(S)
    assert time.monotonic() - began >= 0.03


@pytest.mark.anyio
async def test_pause_waits_for_its_file(tmp_path: Path) -> None:
    gate = tmp_path / "go"
    configure_failpoints(f"{P}=pause({gate})")
    passed = anyio.Event()

    async def hit() -> None:
        await afailpoint(P)
        passed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(hit)
        with anyio.move_on_after(0.05):
            await passed.wait()
        assert not passed.is_set()
        assert not failpoint_spent(P), "fires on every hit: never spent"
        gate.touch()
        with anyio.fail_after(5):
            await passed.wait()


def _python(code: str, spec: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={"MAILRUN_FAILPOINTS": spec, "PATH": ""},
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )


@pytest.mark.slow  # a real Python process
def test_crash_exits_the_process_at_once() -> None:
    proc = _python(
        f"from runtime.failpoints import failpoint; failpoint({A!r}); print('survived')",
        f"{A}=crash",
    )
    assert proc.returncode == CRASH_EXIT_CODE
    assert "survived" not in proc.stdout
    assert f"failpoint {A}: crash" in proc.stderr


CHECK = """
from runtime.failpoints import check_failpoints, failpoint
try:
    print("armed:", check_failpoints())
except ValueError as exc:
    print("refused:", exc)
failpoint(%r)
print("survived")
"""


@pytest.mark.slow  # a real Python process
def test_a_malformed_environment_arms_nothing_and_says_so_when_checked() -> None:
    proc = _python(CHECK % A, f"{A}=crash;{B}=sleep(x)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"refused: MAILRUN_FAILPOINTS: sleep needs milliseconds: '{B}=sleep(x)'",
        "survived",
    ]


@pytest.mark.slow  # a real Python process
def test_an_armed_process_warns_naming_its_failpoints() -> None:
    proc = _python(CHECK % S, f"{A}=1*raise; {B}=sleep(5)")
    assert proc.stdout.splitlines() == [f"armed: ['{A}=1*raise', '{B}=sleep(5)']", "survived"]
    # Logging unconfigured: Python's last-resort handler prints the warning.
    assert proc.stderr.splitlines() == [
        f"failpoints armed (MAILRUN_FAILPOINTS): {A}=1*raise; {B}=sleep(5)"
    ]
