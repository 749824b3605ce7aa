"""What the test workflows record, read back from the events."""

from __future__ import annotations

from runtime import DispatchProcessed


def seen(events: list[DispatchProcessed]) -> list[dict[str, object]]:
    """The handler's record of items, from the latest DispatchProcessed state."""
    latest = max(events, key=lambda e: e.seq or 0)
    result: list[dict[str, object]] = latest.state.get("seen", [])
    return result
