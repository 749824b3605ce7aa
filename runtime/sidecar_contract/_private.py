"""Private state: what mailrun writes on disk is for its own user only.

Every process that writes state (``mailrun up``, the hub, a sidecar) calls
:func:`private_umask` first thing, so every file it or its children create is
0600 and every directory 0700 whatever mode the code asks for: SQLite's
``-wal`` and ``-shm`` files, logs, nats-server's files included. A state dir
an earlier release wrote (0644 files in 0755 dirs) is brought in line at
start by :func:`make_private`.

A deleted deployment's sidecar directory holds its private key and every
mail body it received: :func:`remove_sidecar_state` removes it, but never
from under a sidecar that still runs from it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
from pathlib import Path

from ._restore import record_path

PRIVATE_UMASK = 0o077
HOME_LOCK_FILE = "sidecar.lock"
"""In a deployment's directory (beside its restore record): held with
``flock`` by the sidecar running from it, for the life of the process."""


def private_umask() -> None:
    """Make everything this process (and its children) creates owner-only."""
    os.umask(PRIVATE_UMASK)


def make_private(root: Path, *, recursive: bool = True) -> int:
    """Take group and other permissions off ``root`` and what is in it.

    Only directories and regular files are changed (symlinks are neither
    followed nor changed); entries that vanish meanwhile are skipped. Without
    ``recursive``, only ``root`` and its direct entries. Returns how many
    entries changed.
    """
    changed = _restrict(root)
    if recursive:
        for parent, dirs, files in os.walk(root):
            for name in (*dirs, *files):
                changed += _restrict(Path(parent, name))
    else:
        try:
            entries = list(root.iterdir())
        except FileNotFoundError:
            return changed
        for entry in entries:
            changed += _restrict(entry)
    return changed


def _restrict(path: Path) -> int:
    try:
        st = path.lstat()
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            return 0
        mode = stat.S_IMODE(st.st_mode)
        if not mode & 0o077:
            return 0
        os.chmod(path, mode & ~0o077)
    except FileNotFoundError:
        return 0
    return 1


def remove_sidecar_state(directory: Path, deployment_id: str) -> bool:
    """Remove ``directory``, a sidecar state dir of ``deployment_id``, unless a
    sidecar runs from it; True when it is gone, False when a sidecar holds it.

    The removal holds the sidecar's own home lock: a sidecar starting
    meanwhile finds it taken (or its directory gone) and stops before it
    writes anything, so nothing is brought back once removed. Raises
    ``OSError`` when the removal itself fails.
    """
    home = record_path(directory, deployment_id).parent
    try:
        fd = os.open(home / HOME_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except (FileNotFoundError, NotADirectoryError):
        fd = None  # no home there: no sidecar ever ran from it, and none can start
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(directory)
    finally:
        if fd is not None:
            os.close(fd)
    return True
