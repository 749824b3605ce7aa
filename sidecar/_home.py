"""The sidecar's home: the directory it runs from, locked, with an id no copy shares.

The hub must tell "the owner restarted in its own directory" (carry on from
its disk at once) from "someone copied the directory, or just the restore
record" (refuse it, or start it from the hub's state). Nothing inside the
directory can say which, since a copy has the same bytes. So the id is made
of where the directory is: the machine, and the device and inode of the
directory itself, which a copy never keeps. A random nonce kept in the
directory tells a directory created anew (whose inode the file system may
hand out again) from the one it replaces.

An exclusive lock on a file in the directory, held for the life of the
process, makes "this home" mean "this one process": a second process
started on the same directory stops at once, and a restart can take
ownership back without waiting for a lease, because the lock proves the
previous process is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import socket
from pathlib import Path
from types import TracebackType

from runtime import write_atomic
from runtime.sidecar_contract import HOME_LOCK_FILE

from ._errors import HomeLocked, RestoreRecordMissing

LOCK_FILE = HOME_LOCK_FILE
NONCE_FILE = "home"
_MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


class Home:
    """A context manager: locks ``directory`` and computes its :attr:`id`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.id = ""
        self._fd: int | None = None

    def __enter__(self) -> Home:
        try:
            fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            # Removed since the record was read: the deployment was deleted.
            raise RestoreRecordMissing(f"{self.directory} was removed") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise HomeLocked(
                f"another sidecar process runs from {self.directory} (it holds {LOCK_FILE})"
            ) from None
        self._fd = fd
        stat = self.directory.stat()
        seed = f"{_machine_id()}:{stat.st_dev}:{stat.st_ino}:{self._nonce()}"
        self.id = "home_" + hashlib.sha256(seed.encode()).hexdigest()[:26]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None

    def _nonce(self) -> str:
        path = self.directory / NONCE_FILE
        with contextlib.suppress(FileNotFoundError):
            text = path.read_text().strip()
            if text:
                return text
        nonce = secrets.token_hex(13)
        write_atomic(path, nonce.encode())
        return nonce


def _machine_id() -> str:
    for name in _MACHINE_ID_FILES:
        with contextlib.suppress(OSError):
            text = Path(name).read_text().strip()
            if text:
                return text
    return socket.gethostname()
