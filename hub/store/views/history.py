"""A run's recorded history, as replay reads it: the items the run processed,
in its order, each with the state, effects, steps and end it recorded.

Only what the store still holds can be read (hub.md, "Retention"): the
run's latest ``run_history`` events keep their payload, and a processed
dispatch keeps its inline body (at most ``INLINE_BODY_LIMIT``) while its
DispatchProcessed does. So:

- Its events go with the item they belong to (:mod:`.grouping`).
- The events that keep their payload are the run's latest ones. If its
  RunStarted is among them the history starts at the beginning, from ``{}``;
  otherwise the oldest item held (whose effects may be gone) only gives the
  state the history starts from.
- An item whose body is gone (claim-checked and collected, or trimmed) is in
  the history without one: replay cannot call the handler with it, and goes
  on from the state it recorded.
- An item the run refused for having ended (``refused_terminal``) was no
  handler call: the history stops there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import msgspec

from runtime import DispatchOutcome, Event, FrameDecodeError, FrameDecoder, ReplayItem
from runtime.sidecar_contract import Recorded
from runtime.wire import INLINE_BODY_LIMIT, MailContext

from ..._errors import UnknownRun
from ..sql import Row, Tx, json_array, sql
from .grouping import Group, Grouped, group_events

log = logging.getLogger("mailrun.hub.history")

_RUN = sql(
    # The deployment's entrypoint is its active version's.
    "SELECT r.deployment_id, r.entrypoint, COALESCE((SELECT v.entrypoint"
    " FROM deployment_version v WHERE v.deployment_id = d.id AND v.version = d.version),"
    " d.entrypoint) AS deployment_entrypoint, d.address"
    " FROM workflow_run r JOIN deployment d ON d.id = r.deployment_id"
    " WHERE r.id = ? AND r.is_anchor = 0"
)
# The partial index of the rows that keep their payload: the cost is the
# history, not the run's past. (PostgreSQL's run_event has a rowid column.)
_EVENTS = sql(
    "SELECT payload FROM run_event WHERE run_id = ? AND payload IS NOT NULL ORDER BY rowid"
)
_DISPATCHES = (
    "SELECT id, seq, kind, message_id, sender, subject, body, body_size, context"
    " FROM workflow_run_dispatch WHERE run_id = ? AND id IN "
)
_DISPATCHES_BY_ID = sql(
    _DISPATCHES + "(SELECT value FROM json_each(?))",
    postgres=_DISPATCHES + "(SELECT value FROM json_array_elements_text(CAST(? AS json)))",
)


class RunHistory(msgspec.Struct, kw_only=True):
    run_id: str
    deployment_id: str
    entrypoint: str
    """The run's handler: a child run's own, else its deployment's active version's."""
    start_state: dict[str, Any]
    start: str
    """``beginning``, or ``after step K`` when the run's first events are gone."""
    items: list[ReplayItem]
    skipped: list[str]
    """What the history leaves out, and why (for the report)."""
    address: str = ""
    """The deployment's address (the domain of the Message-IDs its runs send)."""

    @property
    def replayable(self) -> int:
        """Items the handler can be called with."""
        return sum(1 for item in self.items if item.body is not None)


_decoder: FrameDecoder[Event] = FrameDecoder(Event)


def read_history(tx: Tx, run_id: str) -> RunHistory:
    """A read body: the recorded history of ``run_id`` that the store still holds.

    Raises :class:`UnknownRun` for an id that is no run (an anchor row included).
    """
    run = tx.fetch_one(_RUN, (run_id,))
    if run is None:
        raise UnknownRun(f"no run {run_id!r}")
    rows = tx.fetch_all(_EVENTS, (run_id,))
    grouped = group_events(_decoded(run_id, (bytes(r["payload"]) for r in rows)))
    dispatches = _dispatches(tx, run_id, [g.processed.dispatch_id for g in grouped.groups])
    history = RunHistory(
        run_id=run_id,
        deployment_id=str(run["deployment_id"]),
        entrypoint=str(run["entrypoint"] or run["deployment_entrypoint"]),
        start_state={},
        start="beginning",
        items=[],
        skipped=[],
        address=str(run["address"] or ""),
    )
    _arrange(history, grouped, dispatches)
    return history


def _decoded(run_id: str, payloads: Iterable[bytes]) -> Iterable[Event]:
    for payload in payloads:
        try:
            yield _decoder.decode(payload)
        except FrameDecodeError as exc:
            # The hub wrote it; a release that cannot read it leaves it out.
            log.warning("run %s: an event of its history does not decode: %s", run_id, exc)


def _dispatches(tx: Tx, run_id: str, ids: list[str]) -> dict[str, Row]:
    if not ids:
        return {}
    rows = tx.fetch_all(_DISPATCHES_BY_ID, (run_id, json_array(ids)))
    return {str(r["id"]): r for r in rows}


def _step(group: Group) -> int:
    return group.processed.step or group.processed.seq or 0


def _arrange(history: RunHistory, grouped: Grouped, dispatches: dict[str, Row]) -> None:
    groups = grouped.groups
    if not grouped.started:
        if not groups:
            history.skipped.append("the store holds no processed item of the run")
            return
        # The run's first events are gone: the oldest item held may have lost
        # its effects too, so it gives only the state to start from.
        base, groups = groups[0], groups[1:]
        history.start_state = base.processed.state
        history.start = f"after step {_step(base)}"
        history.skipped.append(
            f"steps up to {_step(base)}: their events are no longer held (the hub keeps"
            " each run's latest --run-history events); replay starts from the state"
            f" step {_step(base)} recorded"
        )
    for group in groups:
        processed = group.processed
        step = _step(group)
        if processed.outcome == DispatchOutcome.REFUSED_TERMINAL:
            history.skipped.append(
                f"step {step} and later: the run had ended, they were no handler calls"
            )
            return
        row = dispatches.get(processed.dispatch_id)
        if row is None:
            # The hub refused this event (the dispatch is not the run's).
            history.skipped.append(f"step {step}: dispatch {processed.dispatch_id} is unknown")
            continue
        body = _body(row)
        if body is None:
            why = (
                f"its body ({row['body_size']} bytes) was claim-checked"
                if row["body_size"] > INLINE_BODY_LIMIT
                else "its body is no longer held"
            )
            history.skipped.append(
                f"step {step} (seq {row['seq']}): {why}; replay goes on from the state it recorded"
            )
        history.items.append(
            ReplayItem(
                dispatch_id=processed.dispatch_id,
                seq=int(row["seq"]),
                kind=str(row["kind"]),
                message_id=row["message_id"],
                sender=row["sender"],
                subject=row["subject"],
                body=body,
                step=step,
                version=processed.version,  # 0 from a sidecar before versions
                recorded=Recorded(
                    state=processed.state,
                    outcome=processed.outcome,
                    effects=group.effects,
                    end=group.end,
                ),
                steps=grouped.steps_of(processed.dispatch_id),
                context=_context(row),
            )
        )


def _context(row: Row) -> MailContext | None:
    """The mail's context as the hub stored it; one that does not decode is none."""
    if row["context"] is None:
        return None
    try:
        return msgspec.msgpack.decode(bytes(row["context"]), type=MailContext)
    except msgspec.DecodeError:
        return None


def _body(row: Row) -> bytes | None:
    """The item's body if the store still holds it (an empty one always is)."""
    if row["body"] is not None:
        return bytes(row["body"])
    return b"" if not row["body_size"] else None
