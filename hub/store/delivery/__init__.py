"""Delivery in the store: dispatches loaded, sent and settled, the events
that sidecars report applied, redelivery, quarantine, dead letters, run
histories trimmed, the blobs dispatches name, and the state a new owner
starts from. The protocol around them is ``hub.wire``'s."""

from .blobs import blob_named as blob_named
from .blobs import collect_blobs as collect_blobs
from .dead_letters import DeadLetter as DeadLetter
from .dead_letters import keep_dead_letter as keep_dead_letter
from .processed import OPEN_DISPATCH as OPEN_DISPATCH
from .processed import DispatchToSettle as DispatchToSettle
from .processed import NewRunEvent as NewRunEvent
from .processed import RunMoved as RunMoved
from .processed import SettledDispatch as SettledDispatch
from .processed import read_processed as read_processed
from .processed import write_processed as write_processed
from .quarantine import cancel_quarantined as cancel_quarantined
from .quarantine import count_quarantined as count_quarantined
from .quarantine import quarantined_dispatch as quarantined_dispatch
from .redelivery import Overdue as Overdue
from .redelivery import find_overdue as find_overdue
from .redelivery import put_back as put_back
from .redelivery import still_open as still_open
from .run_events import EventRun as EventRun
from .run_events import ask_approval as ask_approval
from .run_events import deployment_address as deployment_address
from .run_events import event_run as event_run
from .run_events import finish_run as finish_run
from .run_events import name_child_entrypoint as name_child_entrypoint
from .run_events import record_event as record_event
from .run_events import start_run as start_run
from .run_events import suspend_run as suspend_run
from .run_state import floor_seq as floor_seq
from .run_state import read_state_page as read_state_page
from .sending import ReservedCount as ReservedCount
from .sending import ReservedDispatch as ReservedDispatch
from .sending import count_reserved as count_reserved
from .sending import load_reserved as load_reserved
from .sending import mark_delivered as mark_delivered
from .sending import record_answers as record_answers
from .trimming import trim_history as trim_history

__all__ = [
    "OPEN_DISPATCH",
    "DeadLetter",
    "DispatchToSettle",
    "EventRun",
    "NewRunEvent",
    "Overdue",
    "ReservedCount",
    "ReservedDispatch",
    "RunMoved",
    "SettledDispatch",
    "ask_approval",
    "blob_named",
    "cancel_quarantined",
    "collect_blobs",
    "count_quarantined",
    "count_reserved",
    "deployment_address",
    "event_run",
    "find_overdue",
    "finish_run",
    "floor_seq",
    "keep_dead_letter",
    "load_reserved",
    "mark_delivered",
    "name_child_entrypoint",
    "put_back",
    "quarantined_dispatch",
    "read_processed",
    "read_state_page",
    "record_answers",
    "record_event",
    "start_run",
    "still_open",
    "suspend_run",
    "trim_history",
    "write_processed",
]
