"""nats-py is imported without aiohttp and without importlib.metadata, both of
which stay importable afterwards."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import sys
import runtime
assert "aiohttp" not in sys.modules, "importing runtime imported aiohttp"
assert "importlib.metadata" not in sys.modules, "importing runtime imported importlib.metadata"
from nats.aio import client, transport
assert transport.aiohttp is None
assert client.__version__ == "0.0.0"  # the version nats-py gives itself without the lookup
import aiohttp
import importlib.metadata
assert sys.modules["aiohttp"] is aiohttp
assert importlib.metadata.version("nats-py") != "0.0.0"
print("ok")
"""

_AFTER = """
import aiohttp
import importlib.metadata
import runtime
from nats.aio import client, transport
assert transport.aiohttp is aiohttp, "an earlier aiohttp import was undone"
assert client.__version__ == importlib.metadata.version("nats-py"), "an earlier import was undone"
print("ok")
"""


@pytest.mark.slow  # a fresh Python process per case
@pytest.mark.parametrize("probe", [_PROBE, _AFTER], ids=["hidden", "imported-before"])
def test_nats_py_is_imported_without_aiohttp_or_its_metadata(probe: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert (out.returncode, out.stdout.strip()) == (0, "ok"), out.stderr
