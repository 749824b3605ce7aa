"""nats-py is imported without aiohttp, which stays importable afterwards."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import sys
import runtime.transport
assert "aiohttp" not in sys.modules, "importing runtime.transport imported aiohttp"
from nats.aio import transport
assert transport.aiohttp is None
import aiohttp
assert sys.modules["aiohttp"] is aiohttp
print("ok")
"""

_AFTER = """
import aiohttp
import runtime.transport
from nats.aio import transport
assert transport.aiohttp is aiohttp, "an earlier aiohttp import was undone"
print("ok")
"""


@pytest.mark.slow  # a fresh Python process per case
@pytest.mark.parametrize("probe", [_PROBE, _AFTER], ids=["hidden", "imported-before"])
def test_nats_py_is_imported_without_aiohttp(probe: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert (out.returncode, out.stdout.strip()) == (0, "ok"), out.stderr
