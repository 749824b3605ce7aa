"""Finding ``mailrun up``'s processes from outside, as an operator would.

A sidecar forked by up's fork server is up's grandchild, and its command
line is a title it wrote over its argv (one string, padded with NULs), not
an argv: both forms are read here as words.
"""

from __future__ import annotations

import psutil


def command_words(proc: psutil.Process) -> list[str]:
    """``proc``'s command line as whitespace-separated words (raises ``psutil.Error``)."""
    return " ".join(proc.cmdline()).split()


def descendants(pid: int) -> list[psutil.Process]:
    """Every process below ``pid`` (its children, the fork server's sidecars); [] once gone."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
