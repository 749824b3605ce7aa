"""Names of a package imported the first time they are read (PEP 562), so
that importing the package costs only what its caller uses: ``hub`` and
``hub.up`` re-export their public names this way, and a CLI process that
reads one default does not import the HTTP server and the store with it
(docs/testing.md, "What the suite costs").

The package keeps its ``TYPE_CHECKING`` imports of the same names for
mypy, and a test holds the two lists together.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for ``homes``: each name
    and the module (relative to ``package``) it is imported from. A name
    read once is set on the package, so later reads are plain attribute
    reads."""
    namespace = sys.modules[package].__dict__  # the package, while it runs its __init__

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return __getattr__, __dir__


__all__ = ["lazy_names"]
