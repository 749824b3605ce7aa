"""What an idle sidecar holds in memory: its entry point imports no hub-only
or test-only package, and signing its hello does not load ``cryptography``
(about 7 MiB of RSS in each sidecar process; docs/performance.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

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
