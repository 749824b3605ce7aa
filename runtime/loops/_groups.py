"""Exception groups of one, seen as the exception they hold.

A task group reports even a single failure as an exception group (nested once
per task group it crossed). Where one task's error is the story, the caller
wants that error: :func:`unwrap_group` finds it, :func:`unwrapping_groups`
raises it. A group of several stays a group; what to do with several is the
caller's decision.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def unwrap_group(exc: BaseException) -> BaseException:
    """The lone exception inside ``exc`` and any groups of one nested in it;
    ``exc`` itself when it is no group, or a group of several."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@contextmanager
def unwrapping_groups() -> Iterator[None]:
    """Raise an exception group of one leaving the block as the exception it holds."""
    try:
        yield
    except BaseExceptionGroup as group:
        lone = unwrap_group(group)
        if lone is group:
            raise
        # Raised as its task raised it: its own context, not the group's.
        context, suppress = lone.__context__, lone.__suppress_context__
        try:
            raise lone
        finally:
            lone.__context__, lone.__suppress_context__ = context, suppress
