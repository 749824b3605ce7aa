"""The fault matrix (docs/faults.md): one ``inject`` per fault, shared by the
CI matrix (``test_matrix.py``, one seed) and the soak (``soak.py``, many).

Every ``inject`` waits until part of the workload is accepted, does its
damage, repairs it and calls ``r.over()`` (at the kill of a process it then
starts again, or at the end of an outage it imposed); the round then checks
that nothing accepted was lost, duplicated or reordered and that every mail
settled in time. Parameters (when, how long, how often) come from
``r.rng``, so a seed fixes them. What a fault must prove beyond the checker
is recorded with ``r.expect``; the evidence that the fault happened at all
with ``r.injected``, and a state it waits for in vain with ``r.waiting``
(both: not injected, a harness problem).
"""

from __future__ import annotations

from ..rounds import Fault, Load
from .common import same_processes
from .crashes import (
    f1_publish_crash,
    f2_receipt_crash,
    f2_verify,
    f4_inbox_crash,
    f6_kill_mid_handler,
    f7_torn_record,
    f8_nats_restart,
    f9_hub_kills,
)
from .cuts import (
    f10_inject,
    f10_sidecar_partition,
    f11_hub_paused,
    f11_inject,
    f11_verify,
    f12_inject,
    f12_sidecar_paused,
    f12_verify,
    f15_moved_under_load,
    f15_verify,
    f17_hub_partition,
    f17_inject,
)
from .frames import f3_lost_frames, f5_duplicated_frames
from .outages import HUB_OUTAGE, NATS_OUTAGE, hub_down_long, long_outage_verify, nats_down_long
from .store import (
    f13_failed_commit,
    f13_locked_store,
    f13_verify,
    f14_completion_race,
    f14_verify,
    f16_blobs,
    f16_verify,
)

__all__ = ["FAULTS", "LONG", "f10_inject", "f11_inject", "f12_inject", "f17_inject"]

FAULTS: dict[str, Fault] = {
    f.key: f
    for f in (
        Fault("F1", "hub crash after the dispatch commit, before publish", f1_publish_crash,
              hub_failpoints="hub.dispatch.before_publish=1*crash", start_sidecar=False),
        Fault("F2", "hub crash after the accept commit, before the receipt", f2_receipt_crash,
              hub_failpoints="hub.accept.after_commit=1*crash", verify=f2_verify),
        Fault("F3", "lost Acks and lost mail.inbound frames", f3_lost_frames,
              load=Load(think=0.1)),
        Fault("F4", "sidecar crash after the inbox commit, before the Acks", f4_inbox_crash,
              start_sidecar=False),
        Fault("F5", "duplicated and late mail.inbound, duplicated events", f5_duplicated_frames,
              load=Load(think=0.1)),
        Fault("F6", "sidecar SIGKILL mid-handler", f6_kill_mid_handler),
        Fault("F7", "torn restore record write", f7_torn_record, start_sidecar=False),
        Fault("F8", "nats-server SIGKILL and restart", f8_nats_restart, verify=same_processes),
        Fault("F9", "hub SIGKILL every few seconds", f9_hub_kills,
              load=Load(mails=20, think=0.15)),
        Fault("F10", "sidecar cut from NATS, hub connected", f10_sidecar_partition,
              load=Load(think=0.3), verify=same_processes),
        Fault("F11", "hub frozen (SIGSTOP), then resumed", f11_hub_paused,
              load=Load(think=0.15), verify=f11_verify),
        Fault("F12", "sidecar frozen (SIGSTOP), then resumed", f12_sidecar_paused,
              load=Load(think=0.15), verify=f12_verify),
        Fault("F13-lock", "hub.db write-locked beyond the busy timeout", f13_locked_store,
              verify=f13_verify),
        Fault("F13-raise", "accept commits failing", f13_failed_commit,
              hub_failpoints="hub.accept.before_commit=3*raise", verify=f13_verify),
        Fault("F14", "triggers racing the run's completion", f14_completion_race,
              load=Load(mails=20, think=0.15), verify=f14_verify, ignore=("stop",),
              may_reject=("workflow_run_terminal",)),
        Fault("F15", "deployment moved from a frozen owner, which wakes up", f15_moved_under_load,
              start_sidecar=False, load=Load(think=0.1), verify=f15_verify),
        Fault("F16", "corrupted, half-fetched and orphaned blobs", f16_blobs,
              start_sidecar=False, load=Load(clients=3, mails=6, pad=70_000), verify=f16_verify),
        Fault("F17", "hub cut from NATS, sidecars connected", f17_hub_partition,
              load=Load(think=0.3), verify=same_processes),
    )
}  # fmt: skip
"""Every fault, by key. Durations are random here; the matrix fixes F10's at
6 s, F11's at 5 s, F12's at 4 s and F17's at 7 s."""

LONG: dict[str, Fault] = {
    f.key: f
    for f in (
        Fault("F8-long", "nats-server down 20 minutes", nats_down_long, time_scaled=True,
              load=Load(think=0.1, deadline=NATS_OUTAGE + 120), verify=long_outage_verify),
        Fault("F9-long", "the hub down 30 minutes", hub_down_long, time_scaled=True,
              load=Load(think=0.1, deadline=HUB_OUTAGE + 120), verify=long_outage_verify),
    )
}  # fmt: skip
"""Long outages, run on a cluster whose processes cap their retry delays
(``MAILRUN_BACKOFF_MAX``); ``deadline`` covers the real outage (the
workload's clients keep retrying through it at their own, unscaled pace)."""
