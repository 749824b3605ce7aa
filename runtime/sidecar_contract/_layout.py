"""The file layout of a deployment's sources: what a sidecar can write.

The hub checks a deployment's ``files`` with :func:`check_layout` before it
accepts them, and the sidecar checks them again before it writes them under
its source directory: one rule in one place, so that whatever the hub
accepts, every sidecar can lay out (a layout it cannot write would make it
fail at every start, forever).

A path is relative, ``/``-separated, each component a name a POSIX file
system takes (1 to 255 bytes of UTF-8, no ``.`` or ``..``, no NUL, no
control characters, no backslash); no path is also a directory of another
(``flow.py`` beside ``flow.py/x.py``); the whole is bounded in number of
files, path length and size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import InvalidSources

MAX_FILES = 1000
MAX_PATH_BYTES = 1024  # under the sidecar's source dir, well within PATH_MAX
MAX_NAME_BYTES = 255  # NAME_MAX of ext4, xfs, btrfs, tmpfs
MAX_SOURCE_BYTES = 8 * 1024 * 1024  # every file's text together

_BAD_CHARACTER = re.compile(r"[\x00-\x1f\x7f\\]")


def _check_path(path: str) -> None:
    shown = repr(path[:80]) + ("..." if len(path) > 80 else "")
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise InvalidSources(f"file path {shown} is longer than {MAX_PATH_BYTES} bytes")
    if _BAD_CHARACTER.search(path):
        raise InvalidSources(f"file path {shown} has a control character or a backslash")
    for name in path.split("/"):
        if name in ("", ".", ".."):
            raise InvalidSources(
                f"file path {shown} must be relative, without '.', '..' or empty components"
            )
        if len(name.encode("utf-8")) > MAX_NAME_BYTES:
            raise InvalidSources(f"file path {shown} has a name longer than {MAX_NAME_BYTES} bytes")


def check_layout(files: Mapping[str, str]) -> None:
    """Raise :class:`InvalidSources` naming the first problem of ``files`` ({path: text})."""
    if not files:
        raise InvalidSources("the sources have no file")
    if len(files) > MAX_FILES:
        raise InvalidSources(f"the sources have {len(files)} files, more than {MAX_FILES}")
    size = 0
    for path, text in files.items():
        try:
            _check_path(path)
            size += len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidSources(f"file {path!r} is not valid UTF-8 text") from None
    if size > MAX_SOURCE_BYTES:
        raise InvalidSources(f"the sources hold {size} bytes, more than {MAX_SOURCE_BYTES}")
    directories = {path.rsplit("/", i)[0] for path in files for i in range(1, path.count("/") + 1)}
    clash = sorted(directories.intersection(files))
    if clash:
        raise InvalidSources(f"{clash[0]!r} is both a file and a directory of other files")
