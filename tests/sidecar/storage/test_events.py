"""Events encoded once: a run's state is encoded when its handler returns,
and those bytes are what the inbox stores and what its DispatchProcessed
carries to the hub, in a RunEvents frame the shipper does not decode and
encode again. The wire and the disk do not change: the sidecar's encoders
give the very bytes runtime's frames give."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from runtime import DispatchProcessed, Event, FrameDecoder, RunEvents, RunStarted, encode
from sidecar.link._shipper import EventsFrame
from sidecar.storage import encode_run_state, outgoing, processed
from sidecar.storage._outbox import _Processed
from tests.support import wait_for
from tests.support.harnesses.sidecar import deployed_sidecar, mail, make_deployment

pytestmark = pytest.mark.anyio

STATE: dict[str, Any] = {"n": 3, "seen": [{"subject": "a", "seq": None}, 1.5, True], "x": {}}


def names(struct: type[msgspec.Struct]) -> list[str]:
    return [f.encode_name for f in msgspec.structs.fields(struct)]


def test_a_processed_event_is_runtimes_dispatch_processed_to_the_byte() -> None:
    assert names(_Processed) == names(DispatchProcessed)
    fields: dict[str, Any] = {
        "event_id": "evt_1",
        "run_id": "run_1",
        "at": 12.5,
        "dispatch_id": "dsp_1",
        "seq": 7,
        "outcome": "processed",
        "step": 3,
        "version": 2,
    }
    ours = processed(**fields, state=encode_run_state(STATE))
    theirs = DispatchProcessed(**fields, state=STATE)
    assert ours.frame == encode(theirs)
    assert FrameDecoder(Event).decode(ours.frame) == theirs
    assert (ours.event_id, ours.run_id, ours.kind) == ("evt_1", "run_1", "DispatchProcessed")


def test_an_events_frame_is_runtimes_run_events_to_the_byte() -> None:
    assert names(EventsFrame) == names(RunEvents)
    events: list[Event] = [
        RunStarted(event_id="evt_1", run_id="run_1", at=1.0),
        DispatchProcessed(event_id="evt_2", run_id="run_1", dispatch_id="dsp_1", state=STATE),
    ]
    header: dict[str, Any] = {"deployment_id": "dep_1", "session_id": "ses_1", "owner_epoch": 4}
    raw = [msgspec.Raw(outgoing(e).frame) for e in events]
    assert encode(EventsFrame(**header, events=raw)) == encode(RunEvents(**header, events=events))


TUPLES_AND_BYTES = """
async def main(ctx, item):
    ctx.state["pair"] = (1, 2)
    ctx.state["raw"] = b"x"
    ctx.state["count"] = ctx.state.get("count", 0) + 1
"""


class _Carried(msgspec.Struct):
    state: msgspec.Raw


async def test_the_state_stored_is_the_state_sent_as_json_holds_it(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path, source=TUPLES_AND_BYTES)
    held = anyio.Event()  # the hub holds its answer: the events stay in the outbox
    async with deployed_sidecar(dep, holds={1: held}, request_timeout=30.0) as (hub, _):
        await hub.deliver(mail(dep, 1, "one"))
        await wait_for(lambda: hub.batches == 1, what="the events sent")
        ((stored,),) = dep.query("SELECT state FROM run_state")
        frames = dep.query("SELECT frame FROM outbox WHERE kind = 'DispatchProcessed'")
        held.set()
        [sent] = hub.of_kind(DispatchProcessed)
    # As JSON holds it, what a handler gets back: a list, and base64 text.
    assert msgspec.msgpack.decode(stored) == {"pair": [1, 2], "raw": "eA==", "count": 1}
    assert [bytes(msgspec.msgpack.decode(f, type=_Carried).state) for (f,) in frames] == [stored]
    assert sent.state == {"pair": [1, 2], "raw": "eA==", "count": 1}
