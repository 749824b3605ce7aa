"""What ``up`` hands its children (hub/up/config/host.py)."""

from __future__ import annotations

import os
from pathlib import Path

import hub
from hub.up.config import child_env


def test_children_of_a_checkout_get_its_root_first_on_their_path() -> None:
    env = child_env({"PYTHONPATH": "/elsewhere", "KEPT": "1"})
    root = Path(hub.__file__).resolve().parent.parent
    # The directory that holds the hub package, never the package itself: on
    # the path, hub/'s rooms (mailbox, store...) would shadow modules of the
    # standard library and of the workflows.
    assert env["PYTHONPATH"].split(os.pathsep) == [str(root), "/elsewhere"]
    assert (root / "hub" / "__init__.py").is_file()
    assert env["KEPT"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
