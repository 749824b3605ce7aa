"""The checker: a workload's history against what the run processed.

Inputs, gathered once the system has quiesced (see :mod:`.observe`):

- the :class:`~.workload.History` of every client operation;
- what the run processed, in order: its final ``state["seen"]``;
- what the hub's store says it accepted, per message id (to settle the
  operations that got no answer);
- how many top-level runs each deployment has.

A message id is *accepted* when an operation got an ``ok`` receipt for it,
or when the hub's store holds a dispatch for it (an indeterminate operation
that did reach the hub). Every accepted message must be processed exactly
once; the run must process them in the order of their receipts' ``seq``,
and each client's in the order that client got its receipts. The one
exception is a dispatch accepted for a run that ended before it came to it
(``refused``, F14): it is not processed, and the store must say why.

A workflow that sets a timer per item (``state["set"]``, names) and
records each timer item it sees (``state["fired"]``) is checked the same
way: every timer fired exactly once (``timers_doubled``, ``timers_unexpected``:
safety), and every timer set fired unless its run ended first, which drops
its timers (``timers_missing``: liveness).

That is safety: nothing bad happened. Liveness is the other half: something
good did happen. A system that accepts nothing after a fault loses nothing,
so the checker also demands that every mail of the workload *settles*: its
client, retrying with the same message id, ends with a receipt (or a
rejection the fault allows), none stays indeterminate, and, given a
:class:`Liveness`, each settles within a bound of the fault's end.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .workload import History, Op


@dataclass(frozen=True)
class Processed:
    """One item the run processed: its dispatch and the subject (= message id)."""

    dispatch_id: str
    message_id: str


@dataclass(frozen=True)
class HubDispatch:
    """A dispatch the hub's store holds for a message id."""

    dispatch_id: str
    seq: int
    refused: str | None = None
    """Why its run refused it after it was accepted (``workflow_run_terminal``:
    the run had ended before it came to it), or None."""
    open: bool = False
    """Still ``reserved`` or ``delivered``: not processed yet, nor given up."""


@dataclass(frozen=True)
class Liveness:
    """What "every mail settles" means for one workload.

    Times are seconds on the history's clock (:meth:`History.now`)."""

    healed: float
    """When the fault ended (see ``Round.over``): from then on the system must
    serve again by itself."""
    bound: float
    """Seconds a mail may take to settle, counted from ``healed`` or from its
    first attempt, whichever is later."""
    planned: Collection[str] = ()
    """Every message id the workload meant to send: one never sent (its
    client was still retrying an earlier one when the workload was stopped)
    is unsettled too."""
    may_reject: Collection[str] = ()
    """Rejection reasons the fault makes legitimate (F14:
    ``workflow_run_terminal``); any other 4xx fails the check."""


def processed_from_state(state: Mapping[str, Any]) -> list[Processed]:
    """The recorder workflow's ``state["seen"]`` as :class:`Processed` items."""
    return [Processed(s["dispatch_id"], s["subject"]) for s in state.get("seen", [])]


@dataclass
class CheckResult:
    sent: int = 0
    accepted: int = 0
    processed: int = 0
    indeterminate: int = 0
    """Message ids never settled either way (no receipt, not in the hub's store)."""
    lost: list[str] = field(default_factory=list)
    duplicated: dict[str, int] = field(default_factory=dict)
    reordered: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    conflicting: list[str] = field(default_factory=list)
    """Answers that contradict each other or the store (two dispatches for one id, ...)."""
    refused: list[str] = field(default_factory=list)
    """Accepted, then refused by a run that had ended meanwhile: not processed,
    and the store says so (every retry of the message id is answered
    ``workflow_run_terminal``). Not lost: reported."""
    runs: dict[str, int] = field(default_factory=dict)
    unsettled: list[str] = field(default_factory=list)
    """Mails whose client never got a definite answer (a receipt or a 4xx),
    or that were never sent at all: the system did not serve them."""
    late: list[str] = field(default_factory=list)
    """Settled, but later than the liveness bound after the fault's end."""
    rejected: dict[str, str] = field(default_factory=dict)
    """Message id -> the reason of a 4xx the fault does not allow."""
    stuck: list[str] = field(default_factory=list)
    """Accepted, not processed, and still open in the hub's store when the
    check ran: not lost (yet), but not served either."""
    settle_max: float = 0.0
    """The longest a mail took to settle after the fault's end (seconds)."""
    timers_fired: int = 0
    timers_doubled: dict[str, int] = field(default_factory=dict)
    """Timers whose item the run saw more than once."""
    timers_unexpected: list[str] = field(default_factory=list)
    """Timer items for names no processed item set."""
    timers_missing: list[str] = field(default_factory=list)
    """Timers set by a run that did not end, never fired."""

    @property
    def safe(self) -> bool:
        """Nothing bad happened: nothing lost, duplicated, reordered, made up
        or contradicted, one top-level run per deployment."""
        return not (
            self.lost
            or self.duplicated
            or self.reordered
            or self.unexpected
            or self.conflicting
            or self.timers_doubled
            or self.timers_unexpected
        ) and all(n == 1 for n in self.runs.values())

    @property
    def live(self) -> bool:
        """Something good happened: every mail settled, in time, and processed."""
        return not (
            self.unsettled or self.late or self.rejected or self.stuck or self.timers_missing
        )

    @property
    def ok(self) -> bool:
        return self.safe and self.live

    def summary(self) -> str:
        runs = ",".join(str(n) for _, n in sorted(self.runs.items())) or "-"
        return (
            f"{'ok' if self.ok else 'FAILED'}: sent={self.sent} accepted={self.accepted}"
            f" processed={self.processed} indeterminate={self.indeterminate}"
            f" lost={len(self.lost)} duplicated={len(self.duplicated)}"
            f" reordered={len(self.reordered)} unexpected={len(self.unexpected)}"
            f" conflicting={len(self.conflicting)} refused={len(self.refused)} runs={runs}"
            f" unsettled={len(self.unsettled)} late={len(self.late)}"
            f" rejected={len(self.rejected)} stuck={len(self.stuck)}"
            f" timers={self.timers_fired} timers_doubled={len(self.timers_doubled)}"
            f" timers_unexpected={len(self.timers_unexpected)}"
            f" timers_missing={len(self.timers_missing)}"
            f" settle={self.settle_max:.2f}s"
        )


@dataclass
class _Accepted:
    message_id: str
    client: int
    dispatch_id: str
    seq: int
    run_id: str | None
    receipt_at: float  # when its client got the first receipt (or gave up on it)


def check(
    history: History,
    processed: Sequence[Processed],
    *,
    runs: Mapping[str, int],
    hub_accepted: Mapping[str, HubDispatch] | None = None,
    liveness: Liveness | None = None,
) -> CheckResult:
    """Compare ``history`` with ``processed``; see the module docstring.

    Without ``liveness`` every mail sent must still settle, but with no bound
    on when, and any 4xx counts as settled."""
    hub_accepted = hub_accepted or {}
    ops: dict[str, list[Op]] = defaultdict(list)
    for op in history.ops:
        ops[op.message_id].append(op)
    result = CheckResult(sent=len(ops), processed=len(processed), runs=dict(runs))
    accepted = _accepted(ops, hub_accepted, result)
    result.accepted = len(accepted)
    counts = Counter(p.message_id for p in processed)
    result.duplicated = {mid: n for mid, n in counts.items() if n > 1}
    in_seq = [a.message_id for a in sorted(accepted.values(), key=lambda a: a.seq)]
    refused = {mid for mid, d in hub_accepted.items() if d.refused is not None}
    still_open = {mid for mid, d in hub_accepted.items() if d.open}
    result.refused = [mid for mid in in_seq if mid in refused and not counts[mid]]
    unprocessed = [mid for mid in in_seq if not counts[mid] and mid not in refused]
    result.stuck = [mid for mid in unprocessed if mid in still_open]
    result.lost = [mid for mid in unprocessed if mid not in still_open]
    result.conflicting += [
        f"{mid}: processed, yet refused" for mid in in_seq if mid in refused and counts[mid]
    ]
    for p in processed:
        known = accepted.get(p.message_id)
        if known is None and not _maybe_accepted(ops.get(p.message_id, [])):
            result.unexpected.append(p.message_id)
        elif known is not None and known.dispatch_id != p.dispatch_id:
            result.conflicting.append(
                f"{p.message_id}: processed as {p.dispatch_id}, accepted as {known.dispatch_id}"
            )
    firsts = _first_occurrences(p.message_id for p in processed)
    result.reordered = _global_order(firsts, accepted) + _client_order(firsts, accepted)
    _settling(ops, liveness, result)
    return result


def check_timers(result: CheckResult, state: Mapping[str, Any], *, run_ended: bool) -> CheckResult:
    """Judge the run's timers (``state["set"]``, ``state["fired"]``) into
    ``result``: each fired once; each fired unless the run ended first."""
    set_names = set(state.get("set", []))
    fired = Counter(state.get("fired", []))
    result.timers_fired = sum(fired.values())
    result.timers_doubled = {name: n for name, n in fired.items() if n > 1}
    result.timers_unexpected = sorted(name for name in fired if name not in set_names)
    if not run_ended:
        result.timers_missing = sorted(name for name in set_names if not fired[name])
    return result


def _settling(ops: Mapping[str, list[Op]], live: Liveness | None, result: CheckResult) -> None:
    """Fill in the liveness fields: every mail settled, in time, as allowed."""
    planned = list(dict.fromkeys([*(live.planned if live else ()), *ops]))
    for mid in planned:
        attempts = ops.get(mid, [])
        settled = _settled_by(attempts)
        if settled is None:
            result.unsettled.append(mid)
            continue
        if settled.outcome == "fail" and live is not None:
            reason = str((settled.receipt or {}).get("reason") or settled.status)
            if reason not in live.may_reject:
                result.rejected[mid] = reason
        if live is None or settled.completed is None:
            continue
        since = max(live.healed, min(op.invoked for op in attempts))
        took = settled.completed - since
        result.settle_max = max(result.settle_max, took)
        if took > live.bound:
            result.late.append(f"{mid}: settled {took:.2f}s after the fault, over {live.bound}s")


def _settled_by(attempts: Iterable[Op]) -> Op | None:
    """The attempt that settled a mail: its first receipt or definite rejection."""
    final = [
        op
        for op in attempts
        if op.outcome == "ok" or (op.outcome == "fail" and op.status is not None)
    ]
    return min(final, key=lambda op: (op.completed or 0.0, op.op_id)) if final else None


def _accepted(
    ops: Mapping[str, list[Op]], hub: Mapping[str, HubDispatch], result: CheckResult
) -> dict[str, _Accepted]:
    accepted: dict[str, _Accepted] = {}
    run_ids: dict[str, set[str]] = defaultdict(set)
    for mid, attempts in ops.items():
        oks = [op for op in attempts if op.outcome == "ok" and op.receipt is not None]
        stored = hub.get(mid)
        if oks:
            first = min(oks, key=lambda op: (op.completed or 0.0, op.op_id))
            receipt = first.receipt or {}
            for op in oks:
                if (op.receipt or {}).get("dispatch_id") != receipt.get("dispatch_id"):
                    result.conflicting.append(f"{mid}: receipts name two dispatches")
                    break
            if stored is not None and stored.dispatch_id != receipt.get("dispatch_id"):
                result.conflicting.append(f"{mid}: receipt and store disagree")
            run_ids[str(receipt.get("deployment_id"))].add(str(receipt.get("run_id")))
            accepted[mid] = _Accepted(
                mid, first.client, str(receipt.get("dispatch_id")), int(receipt.get("seq", 0)),
                receipt.get("run_id"), first.completed or 0.0,
            )  # fmt: skip
        elif stored is not None:
            if not _maybe_accepted(attempts):
                result.conflicting.append(f"{mid}: rejected, yet the hub stored it")
            last = max(attempts, key=lambda op: op.op_id)
            accepted[mid] = _Accepted(
                mid, last.client, stored.dispatch_id, stored.seq, None,
                last.completed if last.completed is not None else last.invoked,
            )  # fmt: skip
        elif _maybe_accepted(attempts):
            result.indeterminate += 1
    for dep, ids in sorted(run_ids.items()):
        if len(ids) > 1:
            result.conflicting.append(f"{dep}: receipts name {len(ids)} runs")
    return accepted


def _maybe_accepted(attempts: Iterable[Op]) -> bool:
    """Could the hub have accepted any of these attempts?"""
    return any(op.outcome in ("ok", "indeterminate", None) for op in attempts)


def _first_occurrences(message_ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(message_ids))


def _global_order(order: Sequence[str], accepted: Mapping[str, _Accepted]) -> list[str]:
    """Processing must follow the receipts' seq."""
    out: list[str] = []
    top = 0
    for mid in order:
        if mid not in accepted:
            continue
        seq = accepted[mid].seq
        if seq < top:
            out.append(f"{mid}: seq {seq} processed after seq {top}")
        top = max(top, seq)
    return out


def _client_order(order: Sequence[str], accepted: Mapping[str, _Accepted]) -> list[str]:
    """Each client's mails must be processed in the order it got their receipts."""
    out: list[str] = []
    by_client: dict[int, list[_Accepted]] = defaultdict(list)
    for a in accepted.values():
        by_client[a.client].append(a)
    position = {mid: i for i, mid in enumerate(order)}
    for client, items in sorted(by_client.items()):
        by_receipt = sorted(items, key=lambda a: a.receipt_at)
        wanted = [a.message_id for a in by_receipt if a.message_id in position]
        actual = sorted(wanted, key=position.__getitem__)
        for got, want in zip(actual, wanted, strict=True):
            if got != want:
                out.append(f"client {client}: {got} processed where {want} was due")
                break
    return out
