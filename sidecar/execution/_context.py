"""The handler's ``ctx``: run state plus the effects a handler may ask for.

Effects are not performed while the handler runs: they become events that
are committed with the state change and the envelope's consumption in one
inbox transaction, then shipped. A handler that raises therefore leaves no
effect behind, and its retry starts from the last committed state. Timers
are effects too: set or cancelled with the item, kept and fired by the hub.
Two calls act during the call: ``spawn`` (the hub mints child runs) and
``step``, whose outcome is recorded as soon as its function returns, so
the item processed again returns it instead of calling again. ``spawn``'s
request id, the message id (and Message-ID header) of every mail ``send``
writes and the id of every approval ``request_approval`` asks for are
derived from the dispatch and the call's index, so the same item processed
again (a retry, or a new owner after a takeover) gets the same child back,
sends mail the hub accepts once and waits for the same approval.

Each value a handler hands over is checked against its size limit
(runtime._limits) when it is handed over, the state when the handler
returns: a value too large to ship fails the run (:class:`LimitExceeded`)
instead of reaching the outbox.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any, Protocol

import anyio
import msgspec

from runtime import ApprovalRequested, ChildRunStarted, Event, MailSent, new_id, tracing
from runtime.config import DEFAULT_MAIL_DOMAIN
from runtime.wire import (
    MAX_EVENT,
    MAX_INPUT,
    MAX_PROMPT,
    MAX_RESULT,
    MAX_TIMER_PAYLOAD,
    Attachment,
    SizeLimit,
    StepRecorded,
    TimerCancelled,
    TimerSet,
    clip_text,
    encoded_size,
)

from .._errors import (
    InvalidStep,
    InvalidTimer,
    LimitExceeded,
    RunAlreadyEnded,
    StateNotSerializable,
)
from ..storage import Outgoing
from . import handler_io as _out
from ._steps import StepRecorder, StepRetry, Steps, check_name

log = logging.getLogger("mailrun.workflow")


class Minter(Protocol):
    async def mint_child(self, parent_run_id: str, request_id: str) -> str: ...


def to_json(value: Any, what: str) -> bytes:
    """Encode ``value`` as JSON or raise :class:`StateNotSerializable`."""
    try:
        return msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError) as exc:
        raise StateNotSerializable(f"{what} is not JSON-able: {exc}") from exc


def check_size(value: Any, limit: SizeLimit, what: str) -> None:
    """Raise :class:`LimitExceeded` when ``value`` encodes to more than ``limit``."""
    try:
        size = encoded_size(value)
    except (TypeError, OverflowError, msgspec.EncodeError) as exc:
        raise StateNotSerializable(f"{what} cannot be stored: {exc}") from exc
    if size > limit.bytes:
        raise LimitExceeded(what, size, limit)


def derived_id(prefix: str, key: str) -> str:
    """An id of the usual shape (prefix and 26 hex) that ``key`` always yields."""
    return f"{prefix}_{hashlib.sha256(key.encode()).hexdigest()[:26]}"


def check_events(events: list[Event]) -> None:
    """Every event fits one frame: the limits on each value make this hold, so
    a failure here is a value no other limit covers (a huge address, say)."""
    for event in events:
        check_size(event, MAX_EVENT, f"the {type(event).__name__} event")


def check_encoded(event: Outgoing) -> Outgoing:
    """:func:`check_events` on an event encoded already: its bytes are its size."""
    if len(event.frame) > MAX_EVENT.bytes:
        raise LimitExceeded(f"the {event.kind} event", len(event.frame), MAX_EVENT)
    return event


class _RunLog(logging.LoggerAdapter[logging.Logger]):
    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        return f"[{self.extra['run_id'] if self.extra else ''}] {msg}", kwargs


class Context:
    """What ``main(ctx, item)`` gets. ``state`` must stay a JSON-able dict."""

    def __init__(
        self,
        *,
        run_id: str,
        deployment_id: str,
        dispatch_id: str,
        state: dict[str, Any],
        minter: Minter | None,
        steps: Mapping[str, StepRecorded] | None = None,
        recorder: StepRecorder | None = None,
        step_faults: Mapping[str, BaseException] | None = None,
        now: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[Any]] = anyio.sleep,
        mail_domain: str = DEFAULT_MAIL_DOMAIN,
    ) -> None:
        """``steps`` are the outcomes recorded when this dispatch was processed
        before (by name), ``recorder`` where new ones are made durable (None:
        a replay, which never calls a step). ``step_faults``, ``now`` and
        ``sleep`` are the test kit's: a step's injected failure, and its clock.
        ``mail_domain``: the domain of the deployment's address, the right
        side of the Message-IDs ``send`` returns."""
        self.run_id = run_id
        self.deployment_id = deployment_id
        self.state = state
        self.log: logging.LoggerAdapter[logging.Logger] = _RunLog(log, {"run_id": run_id})
        self.events: list[Event] = []
        self.completed = False
        self.failed = False
        self.result: Any = None
        self.error = ""
        self._dispatch_id = dispatch_id
        self._minter = minter
        self._spawned = 0
        self._sent = 0
        self._mail_domain = mail_domain
        self.approvals: list[str] = []
        """The approvals this call asked for: the run waits for their decisions."""
        self.trace: dict[str, str] = {}
        """This handler call's W3C trace context (``traceparent``), when the
        sidecar traces (docs/tracing.md); empty otherwise."""
        self._now = now
        self.steps = Steps(
            run_id=run_id,
            dispatch_id=dispatch_id,
            recorded=steps or {},
            recorder=recorder,
            faults=step_faults,
            sleep=sleep,
        )
        """This call's steps: their names in order, and what each returned."""

    @property
    def ended(self) -> bool:
        return self.completed or self.failed

    def complete(self, result: Any = None) -> None:
        """End the run successfully with a JSON-able ``result``."""
        self._end()
        to_json(result, "the run result")
        check_size(result, MAX_RESULT, "the run result")
        self.completed, self.result = True, result

    def fail(self, error: str) -> None:
        """End the run as failed with ``error`` (no retry: this is the handler's
        verdict), cut to ``runtime.wire.MAX_ERROR``."""
        self._end()
        self.failed, self.error = True, clip_text(str(error))

    def send(
        self,
        to: str,
        subject: str = "",
        body: bytes | str = b"",
        *,
        html: str | None = None,
        cc: str | Iterable[str] = (),
        reply_to: str | None = None,
        in_reply_to: str | None = None,
        references: str | Iterable[str] = (),
        headers: Mapping[str, str] | None = None,
        attachments: Iterable[_out.Attachment | Attachment | tuple[Any, ...]] = (),
    ) -> str:
        """Send a mail (delivered by the hub once this item is committed);
        returns the Message-ID it carries (``<...@domain>``), the same when
        this item is processed again: a reply names it in In-Reply-To.

        ``html`` makes it multipart/alternative with ``body`` as the text
        part; ``reply_to`` None gives it the run's signed reply address;
        ``attachments`` are :class:`~sidecar.Attachment` or
        ``(filename, data[, content_type])`` (the type guessed from the
        name when not given). Raises :class:`InvalidMail` for what makes no
        mail (docs/sidecar.md, "Sending mail") and :class:`LimitExceeded`
        for a mail over ``MAX_MAIL`` as a whole."""
        parts = _out.checked_mail(
            to,
            subject,
            body,
            html=html,
            cc=cc,
            reply_to=reply_to,
            in_reply_to=in_reply_to,
            references=references,
            headers=headers,
            attachments=attachments,
        )
        self._sent += 1
        mail_id = _out.header_id(self._dispatch_id, self._sent, self._mail_domain)
        self.events.append(
            MailSent(
                event_id=new_id("evt"),
                run_id=self.run_id,
                at=time.time(),
                message_id=f"{self._dispatch_id}:mail:{self._sent}",
                header_id=mail_id,
                trace=tracing.spans.sent(to) if tracing.on else {},
                **parts,
            )
        )
        return mail_id

    async def spawn(self, entrypoint: str, input: Any = None) -> str:
        """Start a child run of ``entrypoint`` (``module:attr`` in the
        deployment's sources) with ``input``; returns its run id.

        The hub mints the child run now (the same one for a retry of this
        item); once this item is committed, the child gets a ``start`` item
        carrying ``input`` and runs here as its own run, and when it ends
        this run gets a ``child`` item.
        """
        to_json(input, "the child run input")
        check_size(input, MAX_INPUT, "the child run input")
        if self._minter is None:
            raise RuntimeError("spawn() is not available in this context")
        self._spawned += 1
        child = await self._minter.mint_child(self.run_id, f"{self._dispatch_id}:{self._spawned}")
        self.events.append(
            ChildRunStarted(
                event_id=new_id("evt"),
                run_id=self.run_id,
                at=time.time(),
                child_run_id=child,
                entrypoint=entrypoint,
                input=input,
                trace=tracing.spans.spawned(entrypoint, child) if tracing.on else {},
            )
        )
        return child

    async def request_approval(self, prompt: str, *, timeout: float | None = None) -> str:
        """Ask a human; returns the approval's id.

        Once this item is committed the run is ``waiting``: the decision
        arrives as the next ``approval`` item, ahead of anything that arrived
        meanwhile (held until then). With ``timeout`` (seconds), an approval
        still undecided then is decided ``timeout`` by the hub, and a later
        decision is refused (409 ``approval_decided``)."""
        check_size(str(prompt), MAX_PROMPT, "the approval prompt")
        expires_at = None
        if timeout is not None:
            if (
                isinstance(timeout, bool)
                or not isinstance(timeout, int | float)
                or not math.isfinite(timeout)
                or timeout <= 0
            ):
                raise InvalidTimer(f"an approval timeout is seconds > 0, not {timeout!r}")
            expires_at = self._now() + float(timeout)
        approval_id = derived_id("apr", f"{self._dispatch_id}:approval:{len(self.approvals) + 1}")
        self.approvals.append(approval_id)
        self.events.append(
            ApprovalRequested(
                event_id=new_id("evt"),
                run_id=self.run_id,
                at=time.time(),
                approval_id=approval_id,
                prompt=str(prompt),
                expires_at=expires_at,
            )
        )
        return approval_id

    def set_timer(
        self,
        name: str,
        *,
        after: float | datetime.timedelta | None = None,
        at: float | datetime.datetime | None = None,
        payload: Any = None,
    ) -> float:
        """Have this run woken by a ``timer`` item ``after`` seconds from now,
        or ``at`` a time (epoch seconds, or an aware datetime); returns when it
        is due (epoch seconds).

        Committed with this item, like a sent mail: a handler that raises
        sets nothing. Setting a name this run has set already moves that
        timer; a time in the past fires at once. The hub keeps the timer (it
        fires while this sidecar is down, delivered when it is back, ``fired_at``
        telling how late) and drops it when the run ends."""
        check_name_timer(name)
        if (after is None) == (at is None):
            raise InvalidTimer("set_timer() takes one of after= (a delay) or at= (a time)")
        if after is not None:
            delay = after.total_seconds() if isinstance(after, datetime.timedelta) else after
            if isinstance(delay, bool) or not isinstance(delay, int | float):
                raise InvalidTimer(f"after= is seconds or a timedelta, not {after!r}")
            if not math.isfinite(delay) or delay < 0:
                raise InvalidTimer(f"after= must be a finite delay >= 0, not {delay!r}")
            due_at = self._now() + float(delay)
        else:
            due_at = _epoch(at)
        try:
            to_json(payload, f"the payload of timer {name!r}")
        except StateNotSerializable as exc:
            raise InvalidTimer(str(exc)) from exc
        check_size(payload, MAX_TIMER_PAYLOAD, f"the payload of timer {name!r}")
        self.events.append(
            TimerSet(
                event_id=new_id("evt"),
                run_id=self.run_id,
                at=time.time(),
                name=name,
                due_at=due_at,
                payload=payload,
            )
        )
        return due_at

    def cancel_timer(self, name: str) -> None:
        """Cancel this run's timer ``name`` with this item (nothing when none
        is pending): it will not fire."""
        check_name_timer(name)
        self.events.append(
            TimerCancelled(event_id=new_id("evt"), run_id=self.run_id, at=time.time(), name=name)
        )

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        retry: StepRetry | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call ``fn(*args, **kwargs)`` (sync or async) once for this item and
        return its result, JSON-able, through JSON.

        The outcome is recorded as soon as ``fn`` returns; this item
        processed again (a retry, a crash, a new owner) returns the recorded
        result without calling ``fn``. A failing ``fn`` is called again after
        ``retry`` (:class:`StepRetry`: 3 calls, 0.5 s backoff doubling) and
        then fails for good: :class:`StepFailed` now and every time this item
        is processed again. Names are unique within one item's processing.
        A sync ``fn`` runs in a worker thread."""
        return await self.steps.run(name, fn, args, kwargs, retry)

    @property
    def now(self) -> float:
        """The time as the run's clock says (the test kit's, under test)."""
        return self._now()

    def _end(self) -> None:
        if self.ended:
            raise RunAlreadyEnded(f"run {self.run_id} was already ended by this handler")


def check_name_timer(name: object) -> None:
    try:
        check_name(name, "timer")
    except InvalidStep as exc:
        raise InvalidTimer(str(exc)) from None


def _epoch(at: object) -> float:
    if isinstance(at, datetime.datetime):
        if at.tzinfo is None or at.utcoffset() is None:
            raise InvalidTimer("at= is an aware datetime (with its zone), not a naive one")
        return at.timestamp()
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        raise InvalidTimer(f"at= is epoch seconds or an aware datetime, not {at!r}")
    return float(at)
