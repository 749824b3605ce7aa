"""Each package's exception tree, as its _errors module (or package) draws it,
is the one its classes define: same parents, same second bases, same HTTP
statuses, and no exception class left out of the drawing."""

from __future__ import annotations

import builtins
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from types import ModuleType

import pytest

MODULES = ["runtime.errors", "hub._errors", "sidecar._errors"]
# indent, class (dotted when another package's), (second base), HTTP status
_LINE = re.compile(r"^( *)([\w.]+)(?: \((\w+)\))?(?:\s+(\d{3})\b)?")


def _drawn(module: ModuleType) -> Iterator[tuple[int, type, type | None, int | None]]:
    assert module.__doc__ is not None
    block = module.__doc__.split("::", 1)[1]
    for line in filter(str.strip, block.splitlines()):
        m = _LINE.match(line)
        assert m is not None, line
        indent, name, second, status = m.groups()
        home, _, attr = name.rpartition(".")
        owner = importlib.import_module(home) if home else module
        cls = getattr(owner, attr)
        yield (
            len(indent),
            cls,
            getattr(builtins, second) if second else None,
            int(status) if status else None,
        )


@pytest.mark.parametrize("name", MODULES)
def test_the_drawn_tree_is_the_defined_one(name: str) -> None:
    module = importlib.import_module(name)
    parents: list[tuple[int, type]] = []
    drawn: set[type] = set()
    for indent, cls, second, status in _drawn(module):
        while parents and parents[-1][0] >= indent:
            parents.pop()
        if parents:
            first = parents[-1][1]
            assert cls.__bases__ == ((first, second) if second else (first,)), cls
        if status is not None:
            assert cls.http_status == status, cls
        parents.append((indent, cls))
        drawn.add(cls)
    defined = {
        c
        for c in _members(module).values()
        if inspect.isclass(c) and issubclass(c, BaseException) and _inside(c, name)
    }
    assert defined - drawn == set()


def _inside(cls: type, name: str) -> bool:
    """Defined in module ``name``, or in a module of package ``name``."""
    return cls.__module__ == name or cls.__module__.startswith(f"{name}.")


def _members(module: ModuleType) -> dict[str, object]:
    """A module's names; a package's, with those of every module in it."""
    names = dict(vars(module))
    for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
        names.update(vars(importlib.import_module(f"{module.__name__}.{info.name}")))
    return names


def test_a_package_of_errors_re_exports_every_class_of_its_modules() -> None:
    from hub import _errors

    classes = {
        c
        for c in _members(_errors).values()
        if inspect.isclass(c) and issubclass(c, BaseException) and _inside(c, "hub._errors")
    }
    assert classes == {c for c in vars(_errors).values() if inspect.isclass(c) and c in classes}
    assert sorted(c.__name__ for c in classes) == sorted(
        n for n in _errors.__all__ if n[0].isupper()
    )


def test_each_hub_reason_names_one_error_class() -> None:
    from hub import _errors

    tree = [c for c in _errors._tree(_errors.HubError) if _inside(c, _errors.__name__)]
    own = [c.reason for c in tree if "reason" in vars(c)]
    assert len(own) == len(set(own))
    for reason in own:
        error = _errors.error_for(reason)
        assert error is not None and error.reason == reason
    assert _errors.error_for("no_such_reason") is None
