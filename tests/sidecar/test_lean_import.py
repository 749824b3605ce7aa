"""What an idle sidecar holds in memory: its entry point imports no hub-only
or test-only package, and signing its hello does not load ``cryptography``
(about 7 MiB of RSS in each sidecar process; docs/performance.md); and what
its imports cost the garbage collector: ``python -m sidecar`` freezes them,
any other importer of the package is left as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

# Each of these costs a sidecar memory it never uses: the hub's HTTP stack
# and CLI, its SMTP client, the benches' and tests' helpers, a second
# Ed25519 library beside the one NATS identities use.
NOT_IN_A_SIDECAR = (
    "aiohttp",
    "aiosmtplib",
    "click",
    "cryptography",
    "httptools",
    "httpx",
    "hub",
    "hypothesis",
    "psutil",
    "pytest",
    "starlette",
    "uvicorn",
    "yaml",
)

_PROBE = f"""
import sys
import sidecar.__main__
from runtime import hello_message
from runtime.wire import public_key_of, sign, verify
seed = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE"
message = hello_message("nonce", "dep_1", "ins_1")
verify(public_key_of(seed), message, sign(seed, message))  # what a hello does
loaded = sorted(
    name for name in sys.modules if name.partition(".")[0] in {NOT_IN_A_SIDECAR!r}
)
print(" ".join(loaded) or "none")
"""


@pytest.mark.slow  # a fresh Python process
def test_the_sidecar_entry_point_and_its_hello_import_nothing_it_does_not_need() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "none"


_GC_AT_EXIT = """
import atexit, gc
atexit.register(lambda: print(gc.isenabled(), gc.get_freeze_count()))
"""


@pytest.mark.slow  # fresh Python processes
def test_the_sidecar_process_freezes_what_it_imported_and_no_other_importer_does(
    tmp_path: Path,
) -> None:
    # A sitecustomize that says, as the process exits, whether the collector
    # runs and how many objects are frozen out of its sight.
    (tmp_path / "sitecustomize.py").write_text(_GC_AT_EXIT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}

    def gc_at_exit(*argv: str) -> tuple[bool, int]:
        out = subprocess.run(
            [sys.executable, *argv], capture_output=True, text=True, env=env, timeout=60
        )
        assert out.returncode == 0, out.stderr
        enabled, frozen = out.stdout.split()[-2:]
        return enabled == "True", int(frozen)

    enabled, frozen = gc_at_exit("-m", "sidecar", "--help")
    assert enabled and frozen > 10_000  # its imports, frozen
    assert gc_at_exit("-c", "import sidecar.__main__") == (True, 0)
