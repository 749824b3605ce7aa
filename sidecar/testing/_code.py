"""The workflow's code under test: a handler given as it is, or sources
loaded the way the sidecar loads a deployment's, and the handlers of the
child runs it spawns, by entrypoint."""

from __future__ import annotations

import inspect
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from runtime import Sources, new_id

from .._errors import EntrypointError
from ..execution import Handler, load_workflow, resolve_entrypoint

Children = Mapping[str, Handler] | Callable[[str], Handler] | None
"""A child run's handler by its entrypoint, or how to find it."""


def load_sources(
    files: Mapping[str, str], entrypoint: str
) -> tuple[Handler, Callable[[str], Handler], Path]:
    """The entrypoint's handler, the resolver of the other entrypoints in
    the same sources, and the directory they were written to (the caller
    removes it)."""
    sources = Sources(entrypoint=entrypoint, files=dict(files))
    deployment_id = new_id("dep")
    home = Path(tempfile.mkdtemp(prefix="mailrun-kit-"))
    handler = load_workflow(sources, home / "src", deployment_id)

    def resolve(child: str) -> Handler:
        return resolve_entrypoint(deployment_id, child)

    return handler, resolve, home


def child_resolver(handler: Handler, children: Children) -> Callable[[str], Handler]:
    """How a child's entrypoint finds its handler: ``children`` (a mapping, or
    a function), else the name after the colon in ``handler``'s module."""
    if callable(children) and not isinstance(children, Mapping):
        return children
    given = dict(children or {})

    def resolve(entrypoint: str) -> Handler:
        if entrypoint in given:
            return given[entrypoint]
        _, _, attr = entrypoint.partition(":")
        module = sys.modules.get(handler.__module__)
        target = getattr(module, attr, None) if attr else None
        if target is None or not inspect.iscoroutinefunction(target):
            raise EntrypointError(f"child run entrypoint {entrypoint!r} is not known to the test")
        found: Handler = target
        return found

    return resolve
