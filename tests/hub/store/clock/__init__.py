"""Time in the store (hub/store/clock): schedules and timers."""
