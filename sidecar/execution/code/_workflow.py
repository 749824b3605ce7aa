"""The deployment's workflow code: writing its sources and loading its handlers.

The sources (``{path: text}``) are written under
``<state-dir>/workflow-runs/<dep>/src/`` and imported as submodules of a
package of their own (``mailrun_workflow_<hex>``), so user module names never
collide with the sidecar's or the standard library's, relative imports work
between the files, and tracebacks point at real files.

A start whose sources are those already written leaves the files (and the
bytecode Python cached beside them) as they are: a digest of the sources,
kept beside the directory, is written (and fsynced) after the files and
removed before any rewrite, and the files are read back and compared, so a
write cut short by a crash or a power cut is done again at the next start.
A new version of the sources (a rollout, an upgrade's record) has another
digest and is written afresh.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import shutil
import sys
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from runtime import InvalidSources, Sources, check_layout, write_atomic

from ..._errors import EntrypointError, WorkflowLoadError

Handler = Callable[[Any, Any], Awaitable[Any]]

_LAYOUT = b"mailrun workflow sources, layout 1\n"
"""Begins every digest: changed when the way sources are written changes,
so that an upgrade writes them again."""


def load_workflow(sources: Sources, src_dir: Path, deployment_id: str, version: int = 1) -> Handler:
    """Write ``sources`` (``version`` of the deployment's code) to ``src_dir``
    and resolve the entrypoint.

    Raises :class:`WorkflowLoadError` (a file path escapes ``src_dir``, the
    module fails to import) or :class:`EntrypointError` (``module:attr`` is
    malformed or missing, or not an async function).
    """
    _split(sources.entrypoint)
    written = _write_sources(sources.files, src_dir)
    _package(src_dir, deployment_id, version, written=written)
    return resolve_entrypoint(deployment_id, sources.entrypoint, version)


def resolve_entrypoint(deployment_id: str, entrypoint: str, version: int = 1) -> Handler:
    """The handler ``entrypoint`` (``module:attr``) names in the sources
    :func:`load_workflow` loaded: the deployment's own, or a child run's.

    Raises :class:`EntrypointError` or :class:`WorkflowLoadError` as that does.
    """
    module, module_name, attr = _module(deployment_id, entrypoint, version)
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise EntrypointError(
                f"entrypoint {entrypoint!r}: {module_name} has no {attr!r}"
            ) from None
    if not inspect.iscoroutinefunction(target):
        raise EntrypointError(
            f"entrypoint {entrypoint!r} is not an async function"
            " (expected: async def main(ctx, item))"
        )
    handler: Handler = target
    return handler


StateMigration = Callable[[dict[str, Any], int], Awaitable[Any]]


def state_migration(deployment_id: str, entrypoint: str, version: int) -> StateMigration | None:
    """The ``async def migrate_state(state, from_version)`` of the entrypoint's
    module in ``version``, if it has one."""
    module, module_name, _ = _module(deployment_id, entrypoint, version)
    hook = getattr(module, "migrate_state", None)
    if hook is None:
        return None
    if not inspect.iscoroutinefunction(hook):
        raise EntrypointError(
            f"{module_name}.migrate_state is not an async function"
            " (expected: async def migrate_state(state, from_version))"
        )
    migrate: StateMigration = hook
    return migrate


def _module(deployment_id: str, entrypoint: str, version: int) -> tuple[types.ModuleType, str, str]:
    module_name, attr = _split(entrypoint)
    package = _package_name(deployment_id, version)
    try:
        module = importlib.import_module(f"{package}.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.startswith(f"{package}.{module_name}"):
            raise EntrypointError(
                f"entrypoint module {module_name!r} is not in the sources"
            ) from exc
        raise WorkflowLoadError(f"importing {module_name!r} failed: {exc!r}") from exc
    except Exception as exc:
        raise WorkflowLoadError(f"importing {module_name!r} failed: {exc!r}") from exc
    return module, module_name, attr


def _split(entrypoint: str) -> tuple[str, str]:
    module_name, sep, attr = entrypoint.partition(":")
    if not sep or not module_name or not attr:
        raise EntrypointError(f"entrypoint {entrypoint!r} is not 'module:attr'")
    return module_name, attr


def _write_sources(files: dict[str, str], src_dir: Path) -> bool:
    """Lay ``files`` out under ``src_dir`` unless they are there; whether it wrote."""
    # The hub accepted these under the same rule; a record from elsewhere (a
    # join token, an older hub) is held to it before anything is written.
    try:
        check_layout(files)
    except InvalidSources as exc:
        raise WorkflowLoadError(f"the sources cannot be laid out: {exc}") from None
    targets = [(src_dir.joinpath(*name.split("/")), text) for name, text in files.items()]
    mark = written_mark(src_dir)
    digest = _digest(files)
    if _written(mark, digest, targets):
        return False
    if mark.exists():
        mark.unlink()
        # Gone for good before the files it vouched for go: a power cut
        # mid-rewrite must not leave it over what is left of them.
        _fsync_directory(mark.parent)
    # Files of an earlier version of the sources must not linger importable.
    if src_dir.exists():
        shutil.rmtree(src_dir)
    src_dir.mkdir(parents=True, mode=0o700)
    for path, text in targets:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(text, encoding="utf-8")
    write_atomic(mark, digest)
    return True


def written_mark(src_dir: Path) -> Path:
    """The file beside ``src_dir`` holding the digest of the sources written in it."""
    return src_dir.with_name(f".{src_dir.name}.sources")


def _written(mark: Path, digest: bytes, targets: list[tuple[Path, str]]) -> bool:
    """Whether the sources of ``digest`` are on disk whole. The mark says that
    the directory holds these files and no others; reading them back says
    that none was cut short (the files are not fsynced: after a power cut one
    may be empty under a mark that was)."""
    try:
        if mark.read_bytes() != digest:
            return False
        return all(path.read_bytes() == text.encode("utf-8") for path, text in targets)
    except OSError:
        return False


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _digest(files: dict[str, str]) -> bytes:
    hashed = hashlib.sha256(_LAYOUT)
    for name in sorted(files):
        for part in (name.encode("utf-8"), files[name].encode("utf-8")):
            hashed.update(len(part).to_bytes(8, "big"))
            hashed.update(part)
    return hashed.hexdigest().encode()


def _package_name(deployment_id: str, version: int = 1) -> str:
    # Each version is a package of its own: both run side by side while the
    # items stamped with the older one are still being processed.
    suffix = f"_v{version}" if version > 1 else ""
    return "mailrun_workflow_" + deployment_id.rpartition("_")[2] + suffix


def _package(src_dir: Path, deployment_id: str, version: int, *, written: bool) -> str:
    """Register a fresh package whose submodules are the source files."""
    name = _package_name(deployment_id, version)
    if name in sys.modules:  # loaded before in this process: its modules go too
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[loaded]
    package = types.ModuleType(name, f"workflow sources of {deployment_id}")
    package.__path__ = [str(src_dir)]
    package.__package__ = name
    sys.modules[name] = package
    if written:
        # A finder that listed these directories before must look again;
        # files left as they were need no new look (a wake's start).
        importlib.invalidate_caches()
    return name
