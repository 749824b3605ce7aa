"""Kept: what a process remembers of the traces in flight, by key, bounded.

The hub keeps the context of each accepted dispatch until its dispatcher
sends it (and a sent mail's until the relay takes it); a sidecar keeps each
stored dispatch's until its handler runs. Each entry is a context holding a
span's ids only, a few hundred bytes. These live in memory only: a
restart forgets them, and what comes after starts a trace of its own. The
bound keeps a backlog (a sidecar down for an hour, a relay that refuses
everything) from growing the memory: the oldest entries go first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")

DEFAULT_SIZE = 16_384


class Kept(Generic[V]):
    """A bounded map that forgets its oldest entries first."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._size = size
        self._items: OrderedDict[str, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, key: str, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self._size:
            self._items.popitem(last=False)

    def get(self, key: str) -> V | None:
        return self._items.get(key)

    def pop(self, key: str) -> V | None:
        return self._items.pop(key, None)

    def clear(self) -> None:
        self._items.clear()
