"""The project uses its dependencies through their public API only, read
from the source with ``ast``: no module of runtime/, hub/ or sidecar/
imports a third-party package's private module (``x._y``) or an internal
one it does not document (uvicorn's ``protocols``, say), touches an
underscore attribute that is not the project's own, or overrides a
third-party class's underscore method.

An attribute ``obj._name`` is the project's own when ``_name`` is defined
somewhere in its packages: a function, method or class, a module-level or
class-level name, a ``__slots__`` entry, an attribute assigned on ``self``
or ``cls``, or a module of the project. Dunders are everyone's.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.support import REPO

PACKAGES = ("runtime", "hub", "sidecar")

# Undocumented internals of packages whose public modules are fine.
UNDOCUMENTED = ("uvicorn.protocols", "uvicorn.lifespan", "uvicorn.loops", "uvicorn.server")

# Underscore names the standard library documents.
DOCUMENTED = {
    "_exit",  # os._exit: leave without cleanup, in a child process
    "_getframe",  # sys._getframe
    "_asdict",  # NamedTuple's
    "_replace",
    "_fields",
    "_make",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@cache
def modules() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(REPO)): ast.parse(path.read_text(), str(path))
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    }


def _own_names(trees: dict[str, ast.Module]) -> set[str]:
    """Every name the project defines (see the module's docstring)."""
    names = {Path(path).stem for path in trees} | {Path(path).parent.name for path in trees}
    for tree in trees.values():
        scopes: list[ast.AST] = [tree]
        scopes += [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        for scope in scopes:
            for stmt in getattr(scope, "body", []):
                targets: list[ast.expr] = []
                if isinstance(stmt, ast.Assign):
                    targets = stmt.targets
                elif isinstance(stmt, ast.AnnAssign):
                    targets = [stmt.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                if isinstance(stmt, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in stmt.targets
                ):
                    names |= {
                        c.value
                        for c in ast.walk(stmt.value)
                        if isinstance(c, ast.Constant) and isinstance(c.value, str)
                    }
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).partition(".")[0])
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
    return names


def _third_party(module: str) -> bool:
    top = module.partition(".")[0]
    return top not in PACKAGES and top not in sys.stdlib_module_names


def _imported(tree: ast.Module) -> Iterator[tuple[str, str | None]]:
    """(module, name imported from it or None) for each absolute import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                yield node.module, alias.name


def _bound_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> the third-party object it was imported as (``module.name``)."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if _third_party(node.module):
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _third_party(alias.name):
                    bound[alias.asname or alias.name.partition(".")[0]] = alias.name
    return bound


def _resolve(dotted: str) -> object | None:
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        try:
            return importlib.import_module(dotted)
        except ImportError:
            return None


def _has(base: object, name: str) -> bool:
    """Whether ``base`` has ``name``: as a class attribute, or assigned on
    ``self`` in its source (an instance attribute)."""
    if hasattr(base, name):
        return True
    try:
        return f"self.{name} " in inspect.getsource(base)
    except (TypeError, OSError):
        return False


def _base(expr: ast.expr, bound: dict[str, str]) -> str | None:
    if isinstance(expr, ast.Name):
        return bound.get(expr.id)
    if isinstance(expr, ast.Attribute):
        outer = _base(expr.value, bound)
        return f"{outer}.{expr.attr}" if outer else None
    return None


def offences(trees: dict[str, ast.Module], own: set[str]) -> set[tuple[str, str]]:
    found = set()
    for path, tree in trees.items():
        for module, name in _imported(tree):
            if not _third_party(module):
                continue
            parts = module.split(".") + ([name] if name else [])
            if any(_private(part) for part in parts) or module.startswith(UNDOCUMENTED):
                found.add((path, ".".join(parts)))
        bound = _bound_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                if node.attr not in own and node.attr not in DOCUMENTED:
                    found.add((path, "." + node.attr))
            elif isinstance(node, ast.ClassDef):
                for base_expr in node.bases:
                    dotted = _base(base_expr, bound)
                    base = _resolve(dotted) if dotted else None
                    if base is None:
                        continue
                    for stmt in ast.walk(node):
                        defined: list[str] = []
                        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                            defined = [stmt.name]
                        elif isinstance(stmt, ast.Attribute) and isinstance(stmt.ctx, ast.Store):
                            defined = [stmt.attr]
                        for name in defined:
                            if _private(name) and _has(base, name):
                                found.add((path, f"{dotted}.{name}"))
    return found


def test_no_module_uses_a_dependency_s_internals() -> None:
    trees = modules()
    found = offences(trees, _own_names(trees))
    assert sorted(found) == []


def test_the_scan_sees_each_kind_of_offence() -> None:
    source = """
import uvicorn.protocols.http.httptools_impl
from httpx._client import USE_CLIENT_DEFAULT
from starlette import _utils
from aiosmtpd.smtp import SMTP, Session


class P(SMTP):
    def _create_session(self):
        return Session([])

    def _our_own_helper(self):
        return self._our_state


def f(conn, db):
    conn._conn.execute("x")
    return db._execute(), db.__class__, db._our_state
"""
    trees = {"x.py": ast.parse(source)}
    own = {"_our_state", "_our_own_helper"}
    assert offences(trees, own) == {
        ("x.py", "uvicorn.protocols.http.httptools_impl"),
        ("x.py", "httpx._client.USE_CLIENT_DEFAULT"),
        ("x.py", "starlette._utils"),
        ("x.py", "aiosmtpd.smtp.SMTP._create_session"),
        ("x.py", "._conn"),
        ("x.py", "._execute"),
    }
