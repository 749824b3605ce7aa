"""The product's bytecode, written once before the processes a test starts.

Python reads a module's cached bytecode (``__pycache__``) whatever
``PYTHONDONTWRITEBYTECODE`` says; with it set (the Dockerfile sets it, and
so does the environment the suite runs in here) no process writes the
cache, and every hub, `mailrun up` and CLI process the whole-system tests
start compiled the hub's sources again: 0.3-0.45 s of CPU a hub's start
(docs/testing.md, "What the suite costs"). Compiling once writes it for all
of them. A source changed later is compiled again by whoever imports it,
as without the cache: each cached file is checked against its source's
modification time and size.
"""

from __future__ import annotations

import compileall

from ..repo import REPO

PACKAGES = ("hub", "runtime", "sidecar")


def compile_product() -> None:
    """Write the bytecode of every product module whose cache is missing or stale."""
    for package in PACKAGES:
        # quiet=1: errors only; a module that does not compile fails its tests anyway.
        compileall.compile_dir(REPO / package, quiet=1)
