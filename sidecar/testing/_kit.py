"""WorkflowTest: a workflow under test, in process, on the sidecar's own
runs over a real inbox, with the hub's part played in memory and a clock
that moves only when the test says.

The handler code path is the sidecar's: :class:`~sidecar.execution.Runs`
and its run actors over an :class:`~sidecar.storage.Inbox` on a temporary
SQLite file, so the same ``ctx``, size limits, errors, approval gates and
failure policy apply. What the kit does itself is the hub's part
(``_hub``): it writes the items into the inbox as the sidecar's delivery
does, reads the events the run actors commit to the outbox, applies them
and acknowledges them as the shipper's hub would, until nothing moves.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import msgspec

from runtime import new_id
from runtime.config import DEFAULT_MAIL_DOMAIN
from runtime.loops import StackedContext
from runtime.schedules import ScheduleSpec
from runtime.sqlite import Synchronous
from runtime.wire import CANCEL_KIND, RESUME_KIND, FailurePolicy

from ..execution import Handler, MailAuth, Runs, RunsConfig, mail_domain
from ..storage import Inbox
from ._clock import Clock, Timeline, no_wait
from ._code import Children, child_resolver, load_sources
from ._errors import UnknownApproval
from ._faults import StepFaults
from ._hub import KitHub
from ._mail import MailRoom
from ._settle import Settler
from ._views import Delivered, PendingApproval, PendingTimer, RunView, SentMail


class WorkflowTest(StackedContext):
    """``async with WorkflowTest(main) as wf:`` feed items, skip time, read
    what the runs did. Every feeding call returns once the workflow is at
    rest: every item it led to processed, every event applied."""

    def __init__(
        self,
        handler: Handler,
        children: Children = None,
        *,
        name: str = "flow",
        domain: str = DEFAULT_MAIL_DOMAIN,
        start: float | None = None,
        max_attempts: int = 5,
        on_failure: str = "suspend",
        handler_timeout: float = 30.0,
        patience: float = 10.0,
        path: Path | None = None,
        replies_to_ended: str = "top_level",
    ) -> None:
        """``handler``: the deployment's entrypoint; ``children``: a child
        run's handler by its entrypoint (``{"flow:child": child}``), or how to
        find it (default: the attribute after the colon in ``handler``'s
        module). ``start``: the kit clock's first reading (epoch seconds;
        default now). ``max_attempts`` and ``on_failure`` are the
        deployment's failure policy. ``patience``: seconds a settle may take
        before :class:`NotSettled`. ``path``: a directory for the inbox
        (default a temporary one). ``replies_to_ended``: the deployment's
        policy for a reply to a run that has ended (``top_level``: its
        top-level run takes it; ``refuse``: :class:`RunEnded`)."""
        self.deployment_id = new_id("dep")
        self.address = f"{name}@{domain}"
        self.clock = Clock(start)
        self.hub = KitHub(self.deployment_id, self.address)
        self.mailroom = MailRoom(self.hub, replies_to_ended)
        self.faults = StepFaults()
        self.waits: list[float] = []
        """The step retry backoffs the handlers asked for (returned at once)."""
        self.policy = FailurePolicy(
            on_failure=on_failure,
            max_attempts=max_attempts,
            max_backoff=0.0,
            handler_timeout=handler_timeout,
        )
        self._handler = handler
        self._children = children
        self._patience = patience
        self._path = path
        self._timeline = Timeline(self.clock, self.hub)
        self._settler: Settler | None = None
        self._sources_home: Path | None = None

    @classmethod
    def from_sources(
        cls, files: Mapping[str, str], entrypoint: str = "flow:main", **options: Any
    ) -> WorkflowTest:
        """The workflow as a deployment gives it: its files (``{path: text}``)
        and its entrypoint, loaded the way the sidecar loads them."""
        handler, resolve, home = load_sources(files, entrypoint)
        kit = cls(handler, resolve, **options)
        kit._sources_home = home
        return kit

    async def _open(self, stack: AsyncExitStack) -> None:
        if self._path is None:
            self._path = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="mailrun-kit-"))
            )
        if self._sources_home is not None:
            stack.callback(shutil.rmtree, self._sources_home, ignore_errors=True)
        inbox = await Inbox.open(self._path / "inbox.db", synchronous=Synchronous.NORMAL)
        stack.push_async_callback(inbox.aclose)
        stack.callback(self._closed)
        config = RunsConfig(
            now=self.clock,
            sleep=self._no_wait,
            step_faults=self.faults,
            mail_domain=mail_domain(self.address),
        )
        runs = Runs(
            inbox=inbox,
            deployment_id=self.deployment_id,
            handler=self._handler,
            resolve=child_resolver(self._handler, self._children),
            minter=self,
            config=config,
        )
        await runs.set_policy(self.policy)
        await stack.enter_async_context(runs)
        self._settler = Settler(self.hub, inbox, runs, self._patience)

    def _closed(self) -> None:
        self._settler = None

    # --- the hub's seams ----------------------------------------------------------

    async def mint_child(self, parent_run_id: str, request_id: str) -> str:
        return self.hub.mint_child(parent_run_id, request_id)

    async def _no_wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        await no_wait(seconds)

    # --- feeding --------------------------------------------------------------------

    async def mail(
        self,
        subject: str = "",
        body: bytes | str = b"",
        *,
        sender: str | None = "someone@example.org",
        message_id: str | None = None,
        run: str | None = None,
        tag: str | None = None,
        auth: MailAuth | None = None,
        in_reply_to: str | None = None,
        references: Sequence[str] = (),
    ) -> Delivered:
        """A mail to the deployment's address (``name+tag@`` with ``tag``):
        to ``run`` when given, else to the run whose mail ``in_reply_to``
        (or the newest of ``references``) names, else to the top-level run.
        ``auth``: the sender checks the hub gives it (``item.auth``)."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        delivered = self.mailroom.deliver(
            run=run,
            to=self.address,
            tag=tag,
            auth=auth,
            in_reply_to=in_reply_to,
            references=references,
            message_id=message_id,
            sender=sender,
            subject=subject,
            body=data,
        )
        await self.settle()
        return delivered

    async def reply(
        self,
        mail: str | SentMail,
        body: bytes | str = b"",
        *,
        subject: str | None = None,
        sender: str | None = None,
        message_id: str | None = None,
        auth: MailAuth | None = None,
    ) -> Delivered:
        """A reply to a mail a run sent (what ``ctx.send`` returned, or the
        :class:`SentMail`): In-Reply-To names it, References its thread, so
        it goes to the run that sent it (a child too) while that run lives.
        ``subject`` defaults to ``Re: `` and the mail's, ``sender`` to its
        recipient."""
        sent = self.mailroom.find(mail)
        return await self.mail(
            f"Re: {sent.subject}" if subject is None else subject,
            body,
            sender=sent.to if sender is None else sender,
            message_id=message_id,
            auth=auth,
            in_reply_to=sent.header_id,
            references=[*sent.references, sent.header_id],
        )

    async def bounce(
        self,
        mail: str | SentMail,
        status: str = "5.1.1",
        diagnostic: str = "",
        *,
        recipient: str | None = None,
        source: str = "relay",
    ) -> Delivered:
        """The mail a run sent (what ``ctx.send`` returned, or the
        :class:`SentMail`) bounced: a ``bounce`` item to that run, once per
        mail (a second one is a duplicate), ``bounced_at`` the kit's clock."""
        delivered = self.mailroom.bounce(
            mail,
            status=status,
            diagnostic=diagnostic,
            recipient=recipient,
            source=source,
            at=self.clock.now,
        )
        await self.settle()
        return delivered

    async def signal(
        self,
        name: str,
        payload: Any = None,
        *,
        run: str | None = None,
        message_id: str | None = None,
    ) -> Delivered:
        """``POST /runs/{id}/signals``: ``payload`` as the body's JSON."""
        body = b"" if payload is None else json.dumps(payload).encode()
        return await self._feed(
            kind="signal",
            run_id=run or self.run().run_id,
            message_id=message_id,
            subject=name,
            body=body,
        )

    async def approve(self, approval_id: str | None = None, *, run: str | None = None) -> Delivered:
        return await self.decide("approve", approval_id, run=run)

    async def reject(self, approval_id: str | None = None, *, run: str | None = None) -> Delivered:
        return await self.decide("reject", approval_id, run=run)

    async def decide(
        self, decision: str, approval_id: str | None = None, *, run: str | None = None
    ) -> Delivered:
        """Decide an approval (default: the one ``run`` waits for). Raises
        :class:`ApprovalDecided` when it was decided already or timed out,
        as the hub answers 409 ``approval_decided``."""
        if approval_id is None:
            approval_id = self._only_approval(run)
        delivered = self.hub.decide(approval_id, decision)
        await self.settle()
        return delivered

    async def resume(self, run: str | None = None) -> Delivered:
        """``mailrun resume``: a suspended run takes its held items again,
        the one it failed on first."""
        return await self._feed(kind=RESUME_KIND, run_id=self.run(run).run_id)

    async def cancel(
        self, run: str | None = None, reason: str = "", *, terminate: bool = False
    ) -> Delivered:
        """``mailrun cancel``: the handler sees a ``cancel`` item (none with
        ``terminate``) and the run ends cancelled."""
        body = msgspec.json.encode({"reason": reason, "terminate": terminate})
        return await self._feed(
            kind=CANCEL_KIND, run_id=self.run(run).run_id, subject=reason, body=body
        )

    async def _feed(self, **trigger: Any) -> Delivered:
        delivered = self.hub.accept(**trigger)
        await self.settle()
        return delivered

    def fail_step(self, name: str, error: BaseException, *, times: int | None = None) -> None:
        """Make step ``name`` raise ``error`` instead of calling its function
        (every call, or the next ``times``): its retries then run at once."""
        self.faults.add(name, error, times)

    def clear_step_faults(self, name: str | None = None) -> None:
        self.faults.clear(name)

    # --- time -----------------------------------------------------------------------

    def schedule(
        self,
        *,
        every: float | None = None,
        cron: str | None = None,
        tz: str = "UTC",
        subject: str = "",
        payload: Any = None,
    ) -> str:
        """Add a schedule of the deployment (as ``mailrun schedule add``): its
        fires come as ``schedule`` items to the top-level run when time is
        skipped past them. Returns its id; raises InvalidSchedule."""
        return self._timeline.schedule(
            ScheduleSpec(every=every, cron=cron, tz=tz), subject, payload
        )

    def unschedule(self, schedule_id: str) -> None:
        self._timeline.unschedule(schedule_id)

    async def skip(self, seconds: float) -> None:
        """Move the clock ``seconds`` on, firing what falls due on the way, in
        due order, each processed to rest before the next."""
        await self.advance_to(self.clock.now + seconds)

    advance = skip

    async def advance_to(self, when: float) -> None:
        """Move the clock to ``when`` (epoch seconds), as :meth:`skip` does."""
        await self._timeline.advance_to(when, self._live().settle)

    async def settle(self) -> None:
        """Until nothing moves: the accepted items written into the inbox and
        processed, the committed events applied (which may accept more), and
        what is due by now fired (a timer set in the past fires at once)."""
        await self.advance_to(self.clock.now)

    def _live(self) -> Settler:
        if self._settler is None:
            raise RuntimeError("use the WorkflowTest inside `async with`")
        return self._settler

    # --- reading --------------------------------------------------------------------

    def run(self, run_id: str | None = None) -> RunView:
        """A run (None: the top-level one)."""
        return self.hub.run(run_id)

    @property
    def runs(self) -> dict[str, RunView]:
        return dict(self.hub.runs)

    @property
    def status(self) -> str:
        return self.run().status

    @property
    def state(self) -> dict[str, Any]:
        return self.run().state

    @property
    def result(self) -> Any:
        return self.run().result

    @property
    def error(self) -> str | None:
        return self.run().error

    @property
    def sent(self) -> list[SentMail]:
        """Every mail the runs sent, in the order the hub took them."""
        return list(self.hub.sent)

    @property
    def now(self) -> float:
        return self.clock.now

    def timers(self, run: str | None = None) -> list[PendingTimer]:
        """Pending timers (of one run, or all), in due order."""
        found = [t for t in self.hub.timers.values() if run is None or t.run_id == run]
        return sorted(found, key=lambda t: t.due_at)

    def approvals(self, run: str | None = None) -> list[PendingApproval]:
        """Approvals waiting for a decision (of one run, or all)."""
        return [a for a in self.hub.approvals.values() if run is None or a.run_id == run]

    def _only_approval(self, run: str | None) -> str:
        run_id = self.run(run).run_id
        pending = self.approvals(run_id)
        if len(pending) != 1:
            raise UnknownApproval(
                f"run {run_id} waits for {len(pending)} approvals: name the one to decide"
            )
        return pending[0].approval_id
