"""A batch's view of the store, read once and updated in memory as each of
its triggers is decided, in order: the answer each trigger gets, and the
rows the batch is to write.

Later triggers of a batch see what earlier ones did (a run minted, a seq
taken, a message id used, an approval decided) without a statement: the
batch reads before it decides (``lookups.py``, and for mail ``routing.py``:
catch-alls and replies) and writes after (``rows.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from runtime import Reason, RunStatus, new_id
from runtime.wire import INLINE_BODY_LIMIT, accepts_trigger, anchor_is_live

from ..._errors import SenderNotAllowed
from ..mail import MailSettings, decode_settings, sender_refusal
from ..schema import ApprovalStatus, DispatchStatus
from ..sql import Tx
from . import lookups
from .retries import Content, refused_by_run
from .routing import Routing
from .rows import NewDispatch, NewRun, write_rows
from .triggers import Accepted, Receipt, RefusedByRun, Rejected, Trigger, body_digest


@dataclass
class _Deployment:
    """A deployment as the batch reads it, its next seq moved on in memory."""

    id: str
    address: str
    anchor_status: str
    next_seq: int
    version: int  # the active workflow version, stamped on each dispatch
    mail_settings: str | None  # whom it takes mail from (NULL: the defaults)


class Batch:
    """A batch's view of the store, updated in memory as triggers are decided."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.deps: dict[str, _Deployment] = {}
        self.addresses: dict[str, str] = {}
        self.runs: dict[str, tuple[str, str]] = {}  # run id -> (deployment_id, status)
        self.top_level: dict[str, str] = {}  # deployment id -> run id
        self.unstarted: set[str] = set()  # child runs whose start item is not accepted yet
        # (deployment id, message id) -> what it was accepted with, and the answer
        self.seen: dict[tuple[str, str], tuple[Content, Accepted | RefusedByRun]] = {}
        self.approvals: dict[str, list[str]] = {}  # id -> [run_id, deployment_id, status]
        self.woken: set[str] = set()
        self.new_runs: list[NewRun] = []
        self.blobs: list[tuple[object, ...]] = []
        self.dispatches: list[NewDispatch] = []
        self.decided: list[tuple[object, ...]] = []
        self.routing = Routing()
        self.senders: dict[str, MailSettings] = {}  # deployment id -> whom it takes mail from

    def load(self, tx: Tx, triggers: Sequence[Trigger]) -> None:
        """Read what ``triggers`` need, in a handful of statements."""
        approval_ids = sorted({t.approval_id for t in triggers if t.approval_id})
        self._load_approvals(tx, approval_ids)
        addresses = sorted({t.address for t in triggers if t.address and not t.deployment_id})
        dep_ids = sorted({t.deployment_id for t in triggers if t.deployment_id}
                         | {a[1] for a in self.approvals.values()})  # fmt: skip
        for row in lookups.deployments(tx, addresses, dep_ids):
            self.deps[row[0]] = _Deployment(*row)
            self.addresses[row[1]] = row[0]
        nobodys = [a for a in addresses if self._live_at(a) is None]
        if nobodys and (caught := self.routing.catch(tx, nobodys)):
            for row in lookups.deployments(tx, [], caught):
                self.deps[row[0]] = _Deployment(*row)
        # Decided meanwhile? On PostgreSQL another hub may have decided one
        # while this batch waited for the deployments' lock; rare enough to
        # ask again on both databases.
        self._load_approvals(tx, approval_ids)
        if not self.deps:
            return
        if any(t.kind == "mail" for t in triggers):
            self.senders = {
                dep.id: decode_settings(dep.mail_settings)
                for dep in self.deps.values()
                if dep.mail_settings is not None
            }
        run_ids = sorted({t.run_id for t in triggers if t.run_id})
        run_ids += [a[0] for a in self.approvals.values()]
        run_ids += self.routing.find_replies(
            tx, triggers, self._deployment_of, lambda d: self.deps[d].address
        )
        for run_id, dep_id, status, top, unstarted in lookups.runs(tx, sorted(self.deps), run_ids):
            self.runs[run_id] = (dep_id, status)
            if unstarted:
                self.unstarted.add(run_id)
            if top:
                self.top_level[dep_id] = run_id
        wanted: dict[str, set[str]] = {}
        for t in triggers:
            if t.message_id and (dep_id := self._deployment_of(t)) is not None:
                wanted.setdefault(dep_id, set()).add(t.message_id)
        for dep_id, message_ids in sorted(wanted.items()):
            for dsp, run_id, _, seq, mid, status, error, *content in lookups.prior_dispatches(
                tx, dep_id, sorted(message_ids)
            ):
                first = Accepted(
                    dispatch_id=dsp, run_id=run_id, deployment_id=dep_id, seq=seq, duplicate=True
                )
                answer = refused_by_run(first, status, error) or first
                self.seen[(dep_id, mid)] = (Content.stored(content), answer)

    def _load_approvals(self, tx: Tx, approval_ids: list[str]) -> None:
        for approval_id, run_id, dep_id, status in lookups.approvals(tx, approval_ids):
            self.approvals[approval_id] = [run_id, dep_id, status]

    def _live_at(self, address: str) -> str | None:
        dep_id = self.addresses.get(address)
        return dep_id if dep_id and anchor_is_live(self.deps[dep_id].anchor_status) else None

    def _deployment_of(self, t: Trigger) -> str | None:
        if t.approval_id:
            approval = self.approvals.get(t.approval_id)
            return approval[1] if approval else None
        if t.deployment_id:
            return t.deployment_id if t.deployment_id in self.deps else None
        address = t.address or ""
        return self.routing.caught.get(address) or self.addresses.get(address)

    def _refused_sender(self, dep_id: str, sender: str | None) -> str | None:
        settings = self.senders.get(dep_id)
        return None if settings is None else sender_refusal(settings, sender)

    def decide(self, t: Trigger) -> Receipt:
        """Decide one trigger against the batch's view, recording what to write."""
        dep_id = self._deployment_of(t)
        if dep_id is None:
            if t.approval_id:
                return Rejected(
                    reason=Reason.UNKNOWN_APPROVAL, detail=f"no approval {t.approval_id}"
                )
            if t.deployment_id:
                return Rejected(reason=Reason.UNKNOWN_DEPLOYMENT, detail=f"no {t.deployment_id}")
            return Rejected(reason=Reason.UNKNOWN_ADDRESS, detail=f"no deployment at {t.address!r}")
        dep = self.deps[dep_id]
        if not anchor_is_live(dep.anchor_status):
            return Rejected(reason=Reason.DEPLOYMENT_NOT_LIVE, detail=f"{dep_id} is deleted")
        if t.message_id and (seen := self.seen.get((dep_id, t.message_id))):
            content, first = seen
            if different := content.differences(t):
                return Rejected(
                    reason=Reason.MESSAGE_ID_REUSED,
                    detail=f"message id {t.message_id!r} was accepted with another"
                    f" {', '.join(different)} (dispatch {first.dispatch_id})",
                )
            if isinstance(first, RefusedByRun):
                return first
            return msgspec.structs.replace(first, duplicate=True)
        # Whom the deployment takes mail from: after the retry's answer (a
        # mail taken before a deny list changed is still answered as taken).
        if t.kind == "mail" and (refusal := self._refused_sender(dep_id, t.sender)):
            return Rejected(reason=SenderNotAllowed.reason, detail=refusal)
        run_id = t.run_id
        context = self.routing.contexts.get(id(t), t.context)
        if (reply := self.routing.replies.get(id(t))) is not None:
            answered = reply.sent.run_id
            if self.runs.get(answered, ("",))[0] == dep_id and accepts_trigger(
                self.runs[answered][1]
            ):
                run_id = answered
                assert context is not None
                context = msgspec.structs.replace(context, routed_by=reply.routed_by)
            elif dep_id in self.routing.refuse_ended:
                return Rejected(
                    reason=Reason.WORKFLOW_RUN_TERMINAL,
                    detail=f"run {answered}, whose mail this answers, has ended",
                )
        if t.approval_id:
            run_id, _, approval_status = self.approvals[t.approval_id]
            if approval_status != ApprovalStatus.PENDING:
                return Rejected(
                    reason=Reason.APPROVAL_DECIDED, detail=f"{t.approval_id} is decided"
                )
        if run_id is None:
            run_id = self.top_level.get(dep_id)
        elif self.runs.get(run_id, ("",))[0] != dep_id:
            return Rejected(reason=Reason.UNKNOWN_RUN, detail=f"{dep_id} has no run {run_id}")
        status = self.runs[run_id][1] if run_id is not None else None
        if run_id in self.unstarted and t.kind != "start":
            # Its start item comes first: nothing may overtake it.
            return Rejected(
                reason=Reason.RUN_NOT_STARTED, detail=f"child run {run_id} has not started"
            )
        if not accepts_trigger(status):
            return Rejected(reason=Reason.WORKFLOW_RUN_TERMINAL, detail=f"run {run_id} is {status}")
        if run_id is None:
            run_id = new_id("run")
            self.runs[run_id] = (dep_id, RunStatus.RUNNING.value)
            self.top_level[dep_id] = run_id
            self.new_runs.append(
                NewRun(run_id, dep_id, 0, 1, RunStatus.RUNNING.value, self.now, self.now)
            )
        seq = dep.next_seq
        dep.next_seq += 1
        body: bytes | None = t.body
        digest = None
        if len(t.body) > INLINE_BODY_LIMIT:
            body, digest = None, t.digest or body_digest(t.body)
            self.blobs.append((digest, len(t.body), t.body, self.now))
        raw_digest = None
        if t.raw is not None:
            raw_digest = t.raw_digest or body_digest(t.raw)
            self.blobs.append((raw_digest, len(t.raw), t.raw, self.now))
        receipt = Accepted(dispatch_id=new_id("dsp"), run_id=run_id, deployment_id=dep_id, seq=seq)
        self.dispatches.append(
            NewDispatch(
                receipt.dispatch_id,
                dep_id,
                run_id,
                seq,
                t.kind,
                t.message_id,
                t.sender,
                t.subject,
                body,
                digest,
                len(t.body),
                DispatchStatus.RESERVED.value,
                self.now,
                dep.version,
                raw_digest,
                None if t.raw is None else len(t.raw),
                None if context is None else msgspec.msgpack.encode(context),
            )
        )
        if t.message_id:
            self.seen[(dep_id, t.message_id)] = (Content.of(t), receipt)
        if t.approval_id:
            self.approvals[t.approval_id][2] = ApprovalStatus.DECIDED.value
            self.decided.append((ApprovalStatus.DECIDED.value, t.decision, self.now, t.approval_id))
        self.woken.add(dep_id)
        return receipt

    def write(self, tx: Tx) -> None:
        """Write what the decisions made so far need."""
        write_rows(
            tx,
            runs=self.new_runs,
            blobs=self.blobs,
            dispatches=self.dispatches,
            next_seqs=[(self.deps[d].next_seq, d) for d in sorted(self.woken)],
            decided=self.decided,
        )
