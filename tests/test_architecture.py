"""The import graph of runtime/, hub/ and sidecar/, read from the source with
``ast`` (nothing is imported): no cycles, hub and sidecar never import each
other, runtime imports neither, a package's rooms (its sub-packages) are
each entered through their package, imports are relative with at most three
dots (absolute past that reach), and no folder holds more than a dozen
modules, its ``__init__.py`` counted (tests/'s and bench/'s folders too).

Every import statement counts, wherever it stands: at the top, inside a
function, or under ``if TYPE_CHECKING:`` (a type-only cycle still ties two
modules together). Importing ``pkg.mod`` runs ``pkg/__init__.py`` first,
but that implicit edge is left out: with it, every package re-exporting its
modules would be a cycle. An explicit ``from pkg import X`` (or ``from .
import X``, X not a module) inside ``pkg.mod`` does count: with
``pkg/__init__.py`` importing ``pkg.mod`` it is a real cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

from tests.support import REPO

PACKAGES = ("runtime", "hub", "sidecar")
MAX_FLAT_HUB_MODULES = 10
MIN_HUB_ROOMS = 3
MAX_MODULES_A_FOLDER = 12
"""Counting the folder's ``__init__.py``: it is one more module to read there."""
ROOMED = (*PACKAGES, "tests", "bench")
"""The trees whose folders the limit holds: the packages, and the tests and the benchmarks, where
a behaviour's test or script is found by its folder and file name as the code is."""
MAX_IMPORT_DOTS = 3
"""``from ...room import X`` at most: deeper, a module names the room from its package's top."""
CROWDED_FOR_NOW: dict[str, str] = {}
"""Folders over the limit for now, each with why it is not grouped yet."""

Graph = dict[str, set[str]]


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def sources() -> dict[str, Path]:
    """Every module of the three packages, by dotted name."""
    return {
        module_name(path): path
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    }


@cache
def nodes(module: str) -> tuple[ast.AST, ...]:
    """Every node of ``module``'s tree, parsed once for all the checks here
    (each parse and walk of the three packages took most of a second)."""
    path = sources()[module]
    return tuple(ast.walk(ast.parse(path.read_text(), filename=str(path))))


def is_package(module: str) -> bool:
    return sources()[module].name == "__init__.py"


def known(name: str) -> str | None:
    """The module of ours that ``name`` (a module, or a module's attribute) is in."""
    while name:
        if name in sources():
            return name
        name = name.rpartition(".")[0]
    return None


@cache
def bound(package: str) -> frozenset[str]:
    """The names a package's __init__.py binds at its top level."""
    if package not in sources() or not is_package(package):
        return frozenset()
    names: set[str] = set()
    module = nodes(package)[0]
    assert isinstance(module, ast.Module)
    for node in module.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return frozenset(names)


def imported(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The dotted names one import statement in ``module`` brings in."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if node.level:
        package = module if is_package(module) else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    for alias in node.names:
        # ``from pkg import mod`` imports the submodule, unless pkg/__init__.py
        # binds that name itself (``from .mod import mod``); ``from pkg import X``, pkg.
        submodule = f"{base}.{alias.name}"
        if submodule in sources() and alias.name not in bound(base):
            yield submodule
        else:
            yield base


@cache
def graph() -> Graph:
    """Module -> the modules of ours it imports."""
    edges: Graph = {}
    for module in sources():
        edges[module] = {
            target
            for node in nodes(module)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for name in imported(module, node)
            if (target := known(name)) is not None and target != module
        }
    return edges


def cycles(edges: Graph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def crossings(source: str, target: str) -> list[str]:
    """Every import of a ``target`` module by a ``source`` module."""
    return [
        f"{module} -> {imported}"
        for module, targets in sorted(graph().items())
        if module.partition(".")[0] == source
        for imported in sorted(targets)
        if imported.partition(".")[0] == target
    ]


def test_the_graph_sees_every_kind_of_import() -> None:
    edges = graph()
    assert "runtime.errors" in edges["runtime.wire._codec"]  # relative, at the top
    assert "runtime.failpoints" in edges["runtime.testing._failpoints"]  # from .. import mod
    assert "hub.store" in edges["hub.wire.service"]  # a room, through its package
    assert "hub.up.nats" in edges["hub.up.supervisor"]  # inside a function
    assert "hub.store.base" in edges["hub.store"]  # a package re-exporting its module
    assert "hub.cli" in edges["hub.__main__"]  # hub.cli's main, not the module hub.cli.main


def test_no_module_imports_in_a_cycle() -> None:
    found = cycles(graph())
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_a_cycle_is_caught_but_a_re_export_is_not() -> None:
    re_export = {"pkg": {"pkg.mod"}, "pkg.mod": {"pkg._impl"}, "pkg._impl": set()}
    assert cycles(re_export) == []
    through_the_package = {**re_export, "pkg._impl": {"pkg"}}
    assert cycles(through_the_package) == [["pkg", "pkg._impl", "pkg.mod"]]
    type_only = {"a": {"b"}, "b": {"a"}}
    assert cycles(type_only) == [["a", "b"]]


def test_hub_and_sidecar_never_import_each_other() -> None:
    assert crossings("hub", "sidecar") == []
    assert crossings("sidecar", "hub") == []


def test_runtime_imports_neither_hub_nor_sidecar() -> None:
    assert crossings("runtime", "hub") == []
    assert crossings("runtime", "sidecar") == []


def names_from_runtime(package: str) -> set[str]:
    """The names ``package``'s modules import from runtime's front (``from runtime import X``)."""
    return {
        alias.name
        for module in sources()
        if module.partition(".")[0] == package
        for node in nodes(module)
        if isinstance(node, ast.ImportFrom) and node.module == "runtime" and not node.level
        for alias in node.names
    }


def test_runtimes_front_is_what_hub_and_sidecar_share() -> None:
    # A name one side alone uses comes from its room (runtime.wire, ...), so
    # that runtime/__init__.py says what the two processes share, no more.
    init = ast.parse(sources()["runtime"].read_text())
    exported = {
        ast.literal_eval(element)
        for node in init.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__"
        for element in node.value.elts  # type: ignore[attr-defined]
    }
    shared = names_from_runtime("hub") & names_from_runtime("sidecar")
    assert exported - shared == set(), "used by one side only: import it from its room"
    assert shared - exported == set()


def room(module: str) -> str:
    """``hub.store.opening`` -> ``hub.store``; a module at a package's top is its own."""
    return ".".join(module.split(".")[:2])


def rooms_around(module: str) -> list[str]:
    """The rooms a module is inside, outermost first: every package above it
    below the top (``hub.store.delivery.sending`` -> ``hub.store``,
    ``hub.store.delivery``)."""
    parts = module.split(".")
    return [".".join(parts[:depth]) for depth in range(2, len(parts))]


def inside(module: str, room: str) -> bool:
    return module == room or module.startswith(f"{room}.")


def entered_from_outside(edges: Graph) -> list[str]:
    """Every import of a module inside a room (``<package>.<room>.<module>``,
    at any depth, in any of the three packages) by a module outside that
    room: past the room's package."""
    return [
        f"{module} -> {target}"
        for module, targets in sorted(edges.items())
        for target in sorted(targets)
        if any(not inside(module, room) for room in rooms_around(target))
    ]


def test_rooms_are_entered_through_their_package() -> None:
    # <package>.<room>.<module> is the room's own business: others import
    # <package>.<room>, which re-exports what it offers. At every depth: a
    # room inside a room is entered through its own package too, by its
    # neighbours as by everyone else.
    assert entered_from_outside(graph()) == []


def test_a_room_entered_past_its_package_is_caught() -> None:
    edges = {
        "hub.api.mail": {"hub.store", "hub.api._limits"},  # its package; its own room
        "hub.wire.service": {"hub.store.opening"},  # past hub.store
        "runtime.testing._memory": {"runtime.transport._subjects", "runtime.errors"},
        "hub._server": {"hub.api.mail"},  # a module at the top is no room of hub.api
        "hub.store.delivery.sending": {
            "hub.store.sessions.fencing",  # past hub.store.sessions, from next door
            "hub.store.sessions",  # through it
            "hub.store.delivery.blobs",  # its own room
            "hub.store.sql",
        },
        "hub.store": {"hub.store.delivery", "hub.store.delivery.blobs"},  # its room; past it
        "hub.store.delivery": {"hub.store.delivery.blobs"},  # its own module
    }
    assert entered_from_outside(edges) == [
        "hub._server -> hub.api.mail",
        "hub.store -> hub.store.delivery.blobs",
        "hub.store.delivery.sending -> hub.store.sessions.fencing",
        "hub.wire.service -> hub.store.opening",
        "runtime.testing._memory -> runtime.transport._subjects",
    ]


def reach(module: str, package: bool) -> str:
    """The package a relative import of :data:`MAX_IMPORT_DOTS` dots in ``module`` names."""
    base = module if package else module.rpartition(".")[0]
    for _ in range(MAX_IMPORT_DOTS - 1):
        base = base.rpartition(".")[0]
    return base


def import_depths(module: str, tree: Iterable[ast.AST], package: bool = False) -> list[str]:
    """The imports in ``module`` that break the one style: relative, at most
    :data:`MAX_IMPORT_DOTS` dots; absolute (``from hub.store import``) only
    for a module of its own package that so many dots cannot reach."""
    top, near = module.partition(".")[0], reach(module, package)
    found = []
    for node in tree:
        if not isinstance(node, ast.ImportFrom):
            continue
        name = "." * node.level + (node.module or "")
        if node.level > MAX_IMPORT_DOTS:
            found.append(f"{module}: from {name} (more than {MAX_IMPORT_DOTS} dots)")
        elif not node.level and inside(node.module or "", top) and inside(node.module or "", near):
            found.append(f"{module}: from {name} (a relative import reaches it)")
    return found


def test_imports_are_relative_and_shallow() -> None:
    found = [
        line
        for module in sources()
        for line in import_depths(module, nodes(module), is_package(module))
    ]
    assert found == [], "\n".join(found)


def test_a_deep_or_needlessly_absolute_import_is_caught() -> None:
    deep = "hub.api.routes.runs.reading"
    source = (
        "from ....store import get_run\n"  # four dots
        "from hub.store import list_runs\n"  # beyond three dots' reach: absolute
        "from hub.api.context import RouteContext\n"  # ...context reaches it
        "from ...responses import json_response\n"
        "from runtime import Flag\n"
    )
    assert import_depths(deep, ast.walk(ast.parse(source))) == [
        f"{deep}: from ....store (more than 3 dots)",
        f"{deep}: from hub.api.context (a relative import reaches it)",
    ]
    # In a package's __init__.py one dot is the package: hub/api/routes/
    # reaches hub with three.
    absolute = ast.walk(ast.parse("from hub.store import get_run\n"))
    assert import_depths("hub.api.routes", absolute, True) == [
        "hub.api.routes: from hub.store (a relative import reaches it)"
    ]


def test_the_mail_doors_never_import_the_http_api() -> None:
    # SMTP and the NATS ingress take mail as POST /mail/batch does, through
    # hub.intake: none of them is built on another door.
    doors = [
        f"{module} -> {target}"
        for module, targets in sorted(graph().items())
        if room(module) in ("hub.smtp", "hub.wire")
        for target in sorted(targets)
        if room(target) == "hub.api"
    ]
    assert doors == []
    assert "hub.intake" in graph()["hub.smtp._handler"]  # the rule sees the doors' imports


# Where a process starts: its command line and environment are read there,
# once, into its settings (HubSettings, UpSettings, SidecarSettings, a CLI
# command's options), and handed down; nothing below reads the environment.
# sidecar.forking: the fork server's start, and a forked sidecar's (it
# takes the environment up gives it before the sidecar's main reads it).
ENVIRONMENT_READERS = ("hub.cli", "sidecar.__main__", "sidecar.forking", "sidecar.replay.__main__")
# Not yet: each named with why it still reads the environment itself.
ENVIRONMENT_READERS_FOR_NOW = {
    "runtime.failpoints": "MAILRUN_FAILPOINTS, read at import: to be reconciled with settings",
}
_ENVIRONMENT = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})


def touches_environment(node: ast.AST) -> bool:
    """``os.environ`` (or getenv and its kin), or ``from os import environ``."""
    if isinstance(node, ast.Attribute):
        owner = node.value
        return node.attr in _ENVIRONMENT and isinstance(owner, ast.Name) and owner.id == "os"
    if isinstance(node, ast.ImportFrom):
        return node.module == "os" and any(alias.name in _ENVIRONMENT for alias in node.names)
    return False


def reads_environment(module: str) -> bool:
    return any(touches_environment(node) for node in nodes(module))


def test_the_environment_is_read_only_where_a_process_starts() -> None:
    readers = {m for m in sources() if reads_environment(m)}
    below = {
        m
        for m in readers - ENVIRONMENT_READERS_FOR_NOW.keys()
        if not any(m == edge or m.startswith(f"{edge}.") for edge in ENVIRONMENT_READERS)
    }
    assert below == set(), "read the environment where the process starts, pass it down"
    assert "hub.cli.processes.hub" in readers and "sidecar.__main__" in readers  # seen by the scan
    gone = ENVIRONMENT_READERS_FOR_NOW.keys() - readers
    assert gone == set(), "no longer a reader: drop it from the list"


def test_hub_is_rooms_with_few_flat_modules() -> None:
    hub = REPO / "hub"
    flat = sorted(p.name for p in hub.glob("*.py") if p.name != "__init__.py")
    assert len(flat) <= MAX_FLAT_HUB_MODULES, flat
    rooms = sorted(p.parent.name for p in hub.glob("*/__init__.py") if p.parent.name[0] != "_")
    assert len(rooms) >= MIN_HUB_ROOMS, rooms


def folders() -> dict[str, list[str]]:
    """Every folder of the packages, tests/ and bench/ (``hub/store``, ``tests/e2e/runs``,
    ``bench/mail``) -> its modules, ``__init__.py`` too."""
    found: dict[str, list[str]] = {}
    for tree in ROOMED:
        for folder in sorted({p.parent for p in (REPO / tree).rglob("*.py")}):
            found[folder.relative_to(REPO).as_posix()] = sorted(p.name for p in folder.glob("*.py"))
    return found


def crowded(found: dict[str, list[str]]) -> list[str]:
    return [
        f"{folder}/ holds {len(modules)} modules (at most {MAX_MODULES_A_FOLDER}): "
        "group them by concern into sub-packages"
        for folder, modules in sorted(found.items())
        if len(modules) > MAX_MODULES_A_FOLDER
    ]


def test_no_folder_holds_more_than_a_dozen_modules() -> None:
    found = folders()
    assert {"hub/store", "tests/e2e/runs", "bench", "bench/mail"} <= found.keys()  # every tree seen
    over = crowded({f: m for f, m in found.items() if f not in CROWDED_FOR_NOW})
    assert over == [], "\n".join(over)
    grouped = [f for f in CROWDED_FOR_NOW if not crowded({f: found.get(f, [])})]
    assert grouped == [], "no longer crowded: drop it from CROWDED_FOR_NOW"


def test_a_crowded_folder_is_named() -> None:
    # __init__.py is counted: a package with 11 modules beside it is full.
    modules = ["__init__.py", *(f"m{i}.py" for i in range(MAX_MODULES_A_FOLDER))]
    found = {"runtime": modules, "hub/up": modules[:-1]}
    assert crowded(found) == [
        f"runtime/ holds 13 modules (at most {MAX_MODULES_A_FOLDER}): "
        "group them by concern into sub-packages"
    ]
