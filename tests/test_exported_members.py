"""Each package's public surface, pinned: ``__all__`` is sorted, every name in
it is defined in the package, and it is exactly the one recorded in
``tests/exported_members.json``, so adding or removing a public name is a
reviewed diff of that file, never an accident.

The file is generated from the code, never edited by hand::

    python -m tests.test_exported_members --write

(without ``--write``: say what differs, exit 1 if anything does).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

ROOTS = ("runtime", "hub", "sidecar")
REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = Path(__file__).with_name("exported_members.json")
REGENERATE = "python -m tests.test_exported_members --write"

Surfaces = Mapping[str, Sequence[str]]


def packages() -> list[str]:
    """Every public package of the three (none of its parts starts with ``_``), by
    dotted name, found on disk: a new package is pinned like the others; and
    runtime's public modules, which it keeps beside its private ones (anyio's
    layout: a name without ``_`` is public)."""
    found = []
    for root in ROOTS:
        for init in (REPO / root).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO).parts
            if not any(part.startswith("_") for part in parts):
                found.append(".".join(parts))
    for module in (REPO / "runtime").rglob("*.py"):
        parts = module.with_suffix("").relative_to(REPO).parts
        if not any(part.startswith("_") for part in parts):
            found.append(".".join(parts))
    return sorted(found)


def surfaces() -> dict[str, list[str]]:
    """Each public package's ``__all__``, as the code has it now."""
    return {package: list(importlib.import_module(package).__all__) for package in packages()}


def render(current: Surfaces) -> str:
    """The snapshot's text: one name a line, so a change is a diff of its names."""
    return json.dumps({p: list(current[p]) for p in sorted(current)}, indent=2) + "\n"


def recorded() -> dict[str, list[str]]:
    snapshot: dict[str, list[str]] = json.loads(SNAPSHOT.read_text())
    return snapshot


def differences(recorded: Surfaces, current: Surfaces) -> list[str]:
    """What the code exports that the snapshot does not record, and the reverse."""
    found = []
    for package in sorted(set(recorded) | set(current)):
        if package not in recorded:
            found.append(f"{package}: a package the snapshot does not list")
        elif package not in current:
            found.append(f"{package}: in the snapshot, but no such package")
        else:
            now, then = set(current[package]), set(recorded[package])
            found += [
                f"{package}.{name}: exported, not in the snapshot" for name in sorted(now - then)
            ]
            found += [
                f"{package}.{name}: in the snapshot, no longer exported"
                for name in sorted(then - now)
            ]
    return found


def ruff_order(name: str) -> tuple[int, str]:
    """The order ruff (RUF022) keeps ``__all__`` in: CONSTANTS, Classes, the rest."""
    if name.isupper() and len(name) > 1:
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


@pytest.mark.parametrize("package", packages())
def test_all_is_sorted(package: str) -> None:
    names = importlib.import_module(package).__all__
    assert names == sorted(names, key=ruff_order)


@pytest.mark.parametrize("package", packages())
def test_every_exported_name_is_defined_in_the_package(package: str) -> None:
    module = importlib.import_module(package)
    star: dict[str, object] = {}
    exec(f"from {package} import *", star)
    for name in module.__all__:
        assert name in star, f"{package}.{name} is not importable"
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            root = package.partition(".")[0]
            assert value.__module__.partition(".")[0] == root, f"{package}.{name} is borrowed"


@pytest.mark.parametrize("package", packages())
def test_the_public_surface_is_the_recorded_one(package: str) -> None:
    snapshot = recorded()
    current = {package: list(importlib.import_module(package).__all__)}
    found = differences({package: snapshot[package]} if package in snapshot else {}, current)
    assert found == [], (
        "\n".join(found) + f"\nIf meant: {REGENERATE}, and commit the reviewed diff of the file."
    )


def test_the_snapshot_is_the_one_the_code_generates() -> None:
    # Every package, no other, and the file as written: never edited by hand.
    current = surfaces()
    assert differences(recorded(), current) == [], f"regenerate it: {REGENERATE}"
    assert SNAPSHOT.read_text() == render(current), f"regenerate it: {REGENERATE}"


def test_a_change_of_surface_is_told_by_name() -> None:
    then = {"pkg": ["A", "b"], "gone": ["x"]}
    now = {"pkg": ["A", "c"], "new": ["y"]}
    assert differences(then, now) == [
        "gone: in the snapshot, but no such package",
        "new: a package the snapshot does not list",
        "pkg.c: exported, not in the snapshot",
        "pkg.b: in the snapshot, no longer exported",
    ]
    assert differences(now, now) == []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.test_exported_members",
        description="Generate or check tests/exported_members.json from the packages' __all__.",
    )
    parser.add_argument("--write", action="store_true", help="write the snapshot from the code")
    args = parser.parse_args(argv)
    current = surfaces()
    if args.write:
        SNAPSHOT.write_text(render(current))
        print(f"wrote {SNAPSHOT.relative_to(REPO)}: {len(current)} packages")
        return 0
    found = differences(recorded(), current) if SNAPSHOT.exists() else ["no snapshot yet"]
    if not found and SNAPSHOT.read_text() != render(current):
        found = ["same names, but not as generated (order, layout)"]
    print("\n".join(found) or "the snapshot is up to date")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
