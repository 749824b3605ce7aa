"""The deployment's workflow code: loading it, and the items its handler receives.

The sources (``{path: text}``) are written under
``<state-dir>/workflow-runs/<dep>/src/`` and imported as submodules of a
package of their own (``mailrun_workflow_<hex>``), so user module names never
collide with the sidecar's or the standard library's, relative imports work
between the files, and tracebacks point at real files.
"""

from __future__ import annotations

import importlib
import inspect
import shutil
import sys
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from runtime import InvalidSources, Sources, check_layout
from runtime.wire import CANCEL_KIND, SCHEDULE_KIND, TIMER_KIND

from .._errors import EntrypointError, WorkflowLoadError
from ..storage import Envelope

Handler = Callable[[Any, Any], Awaitable[Any]]


def load_workflow(sources: Sources, src_dir: Path, deployment_id: str, version: int = 1) -> Handler:
    """Write ``sources`` (``version`` of the deployment's code) to ``src_dir``
    and resolve the entrypoint.

    Raises :class:`WorkflowLoadError` (a file path escapes ``src_dir``, the
    module fails to import) or :class:`EntrypointError` (``module:attr`` is
    malformed or missing, or not an async function).
    """
    _split(sources.entrypoint)
    _write_sources(sources.files, src_dir)
    _package(src_dir, deployment_id, version)
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


def _write_sources(files: dict[str, str], src_dir: Path) -> None:
    # The hub accepted these under the same rule; a record from elsewhere (a
    # join token, an older hub) is held to it before anything is written.
    try:
        check_layout(files)
    except InvalidSources as exc:
        raise WorkflowLoadError(f"the sources cannot be laid out: {exc}") from None
    targets = [(src_dir.joinpath(*name.split("/")), text) for name, text in files.items()]
    # Files of an earlier version of the sources must not linger importable.
    if src_dir.exists():
        shutil.rmtree(src_dir)
    src_dir.mkdir(parents=True, mode=0o700)
    for path, text in targets:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(text, encoding="utf-8")


def _package_name(deployment_id: str, version: int = 1) -> str:
    # Each version is a package of its own: both run side by side while the
    # items stamped with the older one are still being processed.
    suffix = f"_v{version}" if version > 1 else ""
    return "mailrun_workflow_" + deployment_id.rpartition("_")[2] + suffix


def _package(src_dir: Path, deployment_id: str, version: int) -> str:
    """Register a fresh package whose submodules are the source files."""
    name = _package_name(deployment_id, version)
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[loaded]
    package = types.ModuleType(name, f"workflow sources of {deployment_id}")
    package.__path__ = [str(src_dir)]
    package.__package__ = name
    sys.modules[name] = package
    importlib.invalidate_caches()
    return name


# --- items ---------------------------------------------------------------------


class Item(msgspec.Struct, frozen=True, kw_only=True):
    """What a handler receives for one dispatch (base of every kind's item)."""

    kind: str
    dispatch_id: str
    message_id: str | None = None
    sender: str | None = None
    subject: str = ""
    body: bytes = b""
    text: str = ""
    run_id: str = ""
    seq: int | None = None


class Mail(Item, frozen=True, kw_only=True):
    """A mail. ``raw`` is the whole message as it came over SMTP (headers,
    every part, as sent: parse it with ``email.message_from_bytes``); None
    for a mail from HTTP, NATS or ``ctx.send``."""

    kind: str = "mail"
    raw: bytes | None = None


class Signal(Item, frozen=True, kw_only=True):
    """``POST /runs/{id}/signals``: ``name`` is the subject, ``payload`` the
    body's JSON value (``None`` when the body is not JSON)."""

    kind: str = "signal"
    name: str = ""
    payload: Any = None


class ApprovalDecision(Item, frozen=True, kw_only=True):
    """The decision of an approval this run requested: ``approve``, ``reject``,
    or ``timeout`` when it was asked with a timeout that passed undecided."""

    kind: str = "approval"
    approval_id: str = ""
    decision: str = ""


class Start(Item, frozen=True, kw_only=True):
    """A child run's first item: ``input`` is the value its parent gave ``spawn``."""

    kind: str = "start"
    input: Any = None


class ChildEnded(Item, frozen=True, kw_only=True):
    """A child of this run ended: ``status`` is completed, failed or cancelled."""

    kind: str = "child"
    child_run_id: str = ""
    status: str = ""
    result: Any = None
    error: str | None = None


class Timer(Item, frozen=True, kw_only=True):
    """A timer this run set (``ctx.set_timer``) is due: ``name`` and ``payload``
    as it was set, ``due_at`` when it was due and ``fired_at`` when the hub
    fired it (later than due after an outage), epoch seconds."""

    kind: str = TIMER_KIND
    name: str = ""
    payload: Any = None
    due_at: float = 0.0
    fired_at: float = 0.0


class ScheduleFire(Item, frozen=True, kw_only=True):
    """One fire of a schedule of the deployment (``mailrun schedule add``), for
    its top-level run: ``subject`` and ``payload`` as the schedule has them."""

    kind: str = SCHEDULE_KIND
    schedule_id: str = ""
    payload: Any = None
    due_at: float = 0.0
    fired_at: float = 0.0


class Cancel(Item, frozen=True, kw_only=True):
    """A cancel from outside (``mailrun cancel``): ``reason`` is the one it
    was given. The run ends ``cancelled`` once this item is processed,
    whatever the handler does with it (a ``complete`` or ``fail`` included)."""

    kind: str = CANCEL_KIND
    reason: str = ""


_NOT_JSON = object()


def _json(body: bytes) -> Any:
    """The body's JSON value, or ``_NOT_JSON``. A hub writes these bodies, but
    an item must reach the handler whatever the bytes: a body that does not
    decode leaves the kind's fields empty instead of failing the run."""
    try:
        return msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return _NOT_JSON


def _object(body: bytes) -> dict[str, Any]:
    value = _json(body)
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _signal(common: dict[str, Any], body: bytes) -> Item:
    payload = _json(body)
    return Signal(
        **common, name=common["subject"], payload=None if payload is _NOT_JSON else payload
    )


def _approval(common: dict[str, Any], body: bytes) -> Item:
    fields = _object(body)
    return ApprovalDecision(
        **common,
        approval_id=_text(fields.get("approval_id")),
        decision=_text(fields.get("decision")),
    )


def _start(common: dict[str, Any], body: bytes) -> Item:
    value = _json(body)
    return Start(**common, input=None if value is _NOT_JSON else value)


def _child(common: dict[str, Any], body: bytes) -> Item:
    fields = _object(body)
    error = fields.get("error")
    return ChildEnded(
        **common,
        child_run_id=_text(fields.get("child_run_id")),
        status=_text(fields.get("status")),
        result=fields.get("result"),
        error=error if isinstance(error, str) else None,
    )


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _timer(common: dict[str, Any], body: bytes) -> Item:
    fields = _object(body)
    return Timer(
        **common,
        name=_text(fields.get("name")) or common["subject"],
        payload=fields.get("payload"),
        due_at=_number(fields.get("due_at")),
        fired_at=_number(fields.get("fired_at")),
    )


def _schedule(common: dict[str, Any], body: bytes) -> Item:
    fields = _object(body)
    return ScheduleFire(
        **common,
        schedule_id=_text(fields.get("schedule_id")),
        payload=fields.get("payload"),
        due_at=_number(fields.get("due_at")),
        fired_at=_number(fields.get("fired_at")),
    )


def cancel_order(envelope: Envelope) -> tuple[str, bool]:
    """A ``cancel`` envelope's ``(reason, terminate)``: its body's, the
    subject for a reason the body lacks, and no terminate unless it says so."""
    fields = _object(envelope.body or b"")
    reason = fields.get("reason")
    text = reason if isinstance(reason, str) else envelope.subject or ""
    return text, fields.get("terminate") is True


def _cancel(common: dict[str, Any], body: bytes) -> Item:
    reason = _object(body).get("reason")
    return Cancel(**common, reason=reason if isinstance(reason, str) else common["subject"])


# The item of each kind but mail (an unknown kind arrives as Mail); docs/sidecar.md,
# "Items", has the body each kind carries.
_ITEMS: dict[str, Callable[[dict[str, Any], bytes], Item]] = {
    "signal": _signal,
    "approval": _approval,
    "start": _start,
    "child": _child,
    CANCEL_KIND: _cancel,
    TIMER_KIND: _timer,
    SCHEDULE_KIND: _schedule,
}


def item_of(envelope: Envelope) -> Item:
    """The handler's view of an envelope; an unknown kind arrives as Mail with its kind kept."""
    body = envelope.body or b""
    common: dict[str, Any] = {
        "kind": envelope.kind,
        "dispatch_id": envelope.dispatch_id,
        "message_id": envelope.message_id,
        "sender": envelope.sender,
        "subject": envelope.subject or "",
        "body": body,
        "text": body.decode("utf-8", errors="replace"),
        "run_id": envelope.effective_run_id,
        "seq": envelope.seq,
    }
    make = _ITEMS.get(envelope.kind)
    return make(common, body) if make is not None else Mail(**common, raw=envelope.raw)
