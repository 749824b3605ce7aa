"""The fault checker on hand-made histories: each anomaly is caught, a clean run
passes, and so does nothing that stopped serving (liveness)."""

from __future__ import annotations

from pathlib import Path

from tests.faults.harness.checker import (
    HubDispatch,
    Liveness,
    Processed,
    check,
    check_timers,
    processed_from_state,
)
from tests.faults.harness.workload import History, Op

DEP = "dep_1"
RUNS = {DEP: 1}


def ok(h: History, client: int, mid: str, seq: int, *, at: float | None = None) -> Op:
    op = h.complete(
        h.invoke(client, mid),
        "ok",
        receipt={
            "status": "accepted",
            "dispatch_id": f"dsp_{mid}",
            "run_id": "run_1",
            "deployment_id": DEP,
            "seq": seq,
        },
        status=202,
    )
    if at is not None:
        op.completed = at
    return op


def done(*mids: str) -> list[Processed]:
    return [Processed(f"dsp_{mid}", mid) for mid in mids]


def interleaved() -> History:
    """Three clients, three mails each, accepted round-robin: seq 1..9."""
    h = History()
    seq = 0
    for n in range(3):
        for client in range(3):
            seq += 1
            ok(h, client, f"w{client}-{n}", seq)
    return h


ORDER = ["w0-0", "w1-0", "w2-0", "w0-1", "w1-1", "w2-1", "w0-2", "w1-2", "w2-2"]


def test_a_clean_history_passes() -> None:
    h = interleaved()
    # Retries that timed out before the receipt change nothing.
    h.complete(h.invoke(0, "w0-0"), "indeterminate", error="TimeoutError")
    result = check(h, done(*ORDER), runs=RUNS)
    assert result.ok, result
    assert (result.sent, result.accepted, result.processed) == (9, 9, 9)
    assert result.summary().startswith("ok: sent=9 accepted=9 processed=9")


def test_an_accepted_mail_never_processed_is_lost() -> None:
    result = check(interleaved(), done(*[m for m in ORDER if m != "w1-1"]), runs=RUNS)
    assert not result.ok and result.lost == ["w1-1"]
    assert "lost=1" in result.summary() and result.summary().startswith("FAILED")


def test_a_mail_processed_twice_is_duplicated() -> None:
    result = check(interleaved(), done(*ORDER[:4], "w0-1", *ORDER[4:]), runs=RUNS)
    assert not result.ok and result.duplicated == {"w0-1": 2}
    assert result.lost == [] and result.reordered == []


def test_processing_out_of_seq_order_is_reordered() -> None:
    swapped = [ORDER[0], ORDER[2], ORDER[1], *ORDER[3:]]  # two clients' mails swapped
    result = check(interleaved(), done(*swapped), runs=RUNS)
    assert not result.ok and result.reordered == ["w1-0: seq 2 processed after seq 3"]


def test_seq_order_against_a_clients_receipt_order_breaks_fifo() -> None:
    # The hub gave the later receipt the lower seq: processing in seq order
    # still runs the client's mails in another order than it sent them.
    h = History()
    ok(h, 0, "w0-0", 2, at=1.0)
    ok(h, 0, "w0-1", 1, at=2.0)
    result = check(h, done("w0-1", "w0-0"), runs=RUNS)
    assert not result.ok
    assert result.reordered == ["client 0: w0-1 processed where w0-0 was due"]


def test_processing_what_was_never_accepted_is_unexpected() -> None:
    h = interleaved()
    h.complete(h.invoke(3, "w3-0"), "fail", status=409, error="workflow_run_terminal")
    h.complete(h.invoke(4, "w4-0"), "fail", error="ClientConnectorError")  # never left
    result = check(h, done(*ORDER, "w3-0", "w4-0", "stranger"), runs=RUNS)
    assert not result.ok and result.unexpected == ["w3-0", "w4-0", "stranger"]


def test_indeterminate_mails_are_settled_by_the_hubs_store() -> None:
    h = interleaved()
    h.complete(h.invoke(3, "w3-0"), "indeterminate", error="ServerDisconnectedError")
    h.complete(h.invoke(3, "w3-1"), "indeterminate", error="TimeoutError")
    h.invoke(3, "w3-2")  # still in flight when the workload stopped
    stored = {"w3-0": HubDispatch("dsp_w3-0", 10)}
    # w3-0 reached the hub: it must be processed. w3-1 did not: not a loss.
    result = check(h, done(*ORDER), runs=RUNS, hub_accepted=stored)
    assert result.lost == ["w3-0"] and result.indeterminate == 2
    # An unanswered mail the run did process was simply accepted: safe. But
    # no client ever heard back about these three: not live.
    result = check(h, done(*ORDER, "w3-0", "w3-2"), runs=RUNS, hub_accepted=stored)
    assert result.safe and not result.ok, result
    assert (result.accepted, result.indeterminate) == (10, 2)
    assert result.unsettled == ["w3-0", "w3-1", "w3-2"]


def test_a_second_top_level_run_fails_the_check() -> None:
    result = check(interleaved(), done(*ORDER), runs={DEP: 2})
    assert not result.ok and " runs=2 " in result.summary()
    assert not check(interleaved(), done(*ORDER), runs={DEP: 0}).ok


def test_answers_that_contradict_each_other_conflict() -> None:
    h = interleaved()
    retry = ok(h, 0, "w0-0", 1)
    assert retry.receipt is not None
    retry.receipt["dispatch_id"] = "dsp_other"  # a retry minted a second dispatch
    h.complete(h.invoke(3, "w3-0"), "fail", status=404, error="unknown_address")
    stored = {"w3-0": HubDispatch("dsp_w3-0", 10)}  # ... yet it was stored
    processed = [*done(*ORDER[:-1]), Processed("dsp_elsewhere", "w2-2"), *done("w3-0")]
    result = check(h, processed, runs=RUNS, hub_accepted=stored)
    assert not result.ok
    assert result.conflicting == [
        "w0-0: receipts name two dispatches",
        "w3-0: rejected, yet the hub stored it",
        "w2-2: processed as dsp_elsewhere, accepted as dsp_w2-2",
    ]


def test_histories_round_trip_and_state_reads_as_processed(tmp_path: Path) -> None:
    h = interleaved()
    h.complete(h.invoke(3, "w3-0"), "indeterminate", error="TimeoutError")
    h.dump(tmp_path / "history.jsonl")
    assert History.load(tmp_path / "history.jsonl").ops == h.ops
    state = {"seen": [{"dispatch_id": "dsp_a", "subject": "w0-0", "text": "{}"}], "count": 1}
    assert processed_from_state(state) == [Processed("dsp_a", "w0-0")]
    assert processed_from_state({}) == []


def test_a_dispatch_its_ended_run_refused_is_reported_not_lost() -> None:
    h = interleaved()
    stored = {"w2-2": HubDispatch("dsp_w2-2", 9, refused="workflow_run_terminal")}
    result = check(h, done(*ORDER[:-1]), runs=RUNS, hub_accepted=stored)
    assert result.ok, result
    assert (result.lost, result.refused) == ([], ["w2-2"])
    assert "refused=1" in result.summary()
    # Refused and processed both: the store contradicts the run.
    result = check(h, done(*ORDER), runs=RUNS, hub_accepted=stored)
    assert not result.ok and result.conflicting == ["w2-2: processed, yet refused"]


# --- liveness ----------------------------------------------------------------------


def refuse_after(h: History, healed: float, *mids: str) -> None:
    """Each of ``mids`` tried three times after ``healed``: 503, 503, timeout."""
    for i, mid in enumerate(mids):
        for k, (status, error) in enumerate([(503, "store_unavailable")] * 2 + [(None, "Timeout")]):
            op = h.complete(h.invoke(3, mid), "indeterminate", status=status, error=error)
            op.invoked = op.completed = healed + i + k * 0.3


def test_a_system_that_stops_serving_after_the_fault_is_safe_but_not_live() -> None:
    # What a hub refusing every mail after the fault leaves: nothing lost,
    # since nothing more was accepted; the check must fail all the same.
    h = interleaved()
    refuse_after(h, 5.0, "w3-0")
    live = Liveness(healed=5.0, bound=10.0, planned=[*ORDER, "w3-0", "w3-1"])
    result = check(h, done(*ORDER), runs=RUNS, liveness=live)
    assert result.safe and not result.live and not result.ok
    assert result.unsettled == ["w3-0", "w3-1"]  # w3-1: never even sent
    assert result.summary().startswith("FAILED") and "unsettled=2" in result.summary()


def test_a_mail_settled_past_the_bound_after_the_fault_is_late() -> None:
    h = interleaved()  # every op at ~0 s
    slow = ok(h, 3, "w3-0", 10, at=20.0)
    slow.invoked = 1.0
    on_time = ok(h, 4, "w4-0", 11, at=24.0)
    on_time.invoked = 23.0
    live = Liveness(healed=5.0, bound=8.0)
    result = check(h, done(*ORDER, "w3-0", "w4-0"), runs=RUNS, liveness=live)
    # w3-0: 15 s after the fault's end; w4-0: 1 s after its first attempt.
    assert result.late == ["w3-0: settled 15.00s after the fault, over 8.0s"]
    assert result.safe and not result.ok and result.settle_max == 15.0
    assert check(h, done(*ORDER, "w3-0", "w4-0"), runs=RUNS, liveness=Liveness(5.0, 15.0)).ok


def test_a_rejection_fails_liveness_unless_the_fault_allows_it() -> None:
    h = interleaved()
    h.complete(h.invoke(3, "w3-0"), "fail", receipt={"reason": "workflow_run_terminal"},
               status=409)  # fmt: skip
    result = check(h, done(*ORDER), runs=RUNS, liveness=Liveness(0.0, 10.0))
    assert result.rejected == {"w3-0": "workflow_run_terminal"} and not result.ok
    allowed = Liveness(0.0, 10.0, may_reject=["workflow_run_terminal"])
    assert check(h, done(*ORDER), runs=RUNS, liveness=allowed).ok


def test_an_accepted_mail_still_open_at_the_hub_is_stuck_not_lost() -> None:
    stored = {"w2-2": HubDispatch("dsp_w2-2", 9, open=True)}
    result = check(interleaved(), done(*ORDER[:-1]), runs=RUNS, hub_accepted=stored)
    assert (result.lost, result.stuck) == ([], ["w2-2"])
    assert result.safe and not result.ok and "stuck=1" in result.summary()


def test_timers_fired_twice_never_or_unset_are_caught() -> None:
    h = interleaved()
    state = {"set": ["t-a", "t-b", "t-c"], "fired": ["t-a", "t-b"]}
    clean = check_timers(
        check(h, done(*ORDER), runs=RUNS),
        {**state, "fired": ["t-c", "t-a", "t-b"]},
        run_ended=False,
    )
    assert clean.ok and clean.timers_fired == 3, clean.summary()
    missing = check_timers(check(h, done(*ORDER), runs=RUNS), state, run_ended=False)
    assert missing.safe and not missing.live and missing.timers_missing == ["t-c"]
    # A run that ended dropped what it had pending: not missing.
    assert check_timers(check(h, done(*ORDER), runs=RUNS), state, run_ended=True).ok
    doubled = check_timers(
        check(h, done(*ORDER), runs=RUNS), {**state, "fired": ["t-a", "t-a", "t-x"]},
        run_ended=True,
    )  # fmt: skip
    assert not doubled.safe
    assert (doubled.timers_doubled, doubled.timers_unexpected) == ({"t-a": 2}, ["t-x"])
