"""What the hub counts as mail goes through it (``GET /metrics``).

One :class:`HubMetrics` per hub process, handed to the places that see
each step: the acceptor (accepted, accept latency), the delivery window
(delivered, frames), event ingestion (processed, end-to-end latency), the
redelivery sweep (redelivered), the timer loop (fired, late) and the NATS
connection (reconnects). Each counts after its transaction committed, so a
rolled-back step counts nothing; a frame counts as it goes out. Gauges that
the store or the wire side already know (pending, oldest pending,
quarantined, connected sidecars) are read when scraped.
"""

from __future__ import annotations

from ._families import Counter, Histogram


class HubMetrics:
    def __init__(self) -> None:
        self.accepted = Counter(
            "mailrun_deployment_accepted_total",
            "Triggers accepted per deployment since the hub started (duplicates excluded).",
            "deployment",
        )
        self.delivered = Counter(
            "mailrun_deployment_delivered_total",
            "Dispatches the deployment's sidecar acknowledged as stored.",
            "deployment",
        )
        self.frames = Counter(
            "mailrun_deployment_frames_total",
            "Delivery frames sent to the deployment's sidecar, each carrying one or more"
            " dispatches: delivered over frames is how many a frame carried.",
            "deployment",
        )
        self.processed = Counter(
            "mailrun_deployment_processed_total",
            "Dispatches the deployment's runs processed (or refused as ended).",
            "deployment",
        )
        self.redelivered = Counter(
            "mailrun_deployment_redelivered_total",
            "Dispatches sent again: delivered and not processed within the bound.",
            "deployment",
        )
        self.nats_reconnects = Counter(
            "mailrun_nats_reconnects_total", "Times the hub's NATS connection came back."
        )
        self.accept_seconds = Histogram(
            "mailrun_accept_seconds",
            "From a trigger's hand-over to the acceptor to its committed receipt.",
        )
        self.timers_fired = Counter(
            "mailrun_timers_fired_total",
            "Timers (and approval expiries) fired as items since the hub started.",
        )
        self.timers_late = Counter(
            "mailrun_timers_late_total",
            "Timers fired more than a second after their due time (after an outage, a backlog).",
        )
        self.end_to_end_seconds = Histogram(
            "mailrun_end_to_end_seconds",
            "From a dispatch's acceptance to the hub's record of it processed.",
        )

    def forget(self, deployment_id: str) -> None:
        """The deployment was deleted: its series go."""
        for counter in (
            self.accepted,
            self.delivered,
            self.frames,
            self.processed,
            self.redelivered,
        ):
            counter.forget(deployment_id)

    def render(self) -> str:
        lines: list[str] = []
        for each in (
            self.accepted,
            self.delivered,
            self.frames,
            self.processed,
            self.redelivered,
            self.nats_reconnects,
            self.timers_fired,
            self.timers_late,
            self.accept_seconds,
            self.end_to_end_seconds,
        ):
            lines += each.render()
        return "\n".join(lines) + "\n"
