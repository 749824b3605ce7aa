"""Runs and steps end to end: steps, children, approvals, signals, cancel, timers, schedules,
failures, replay.
"""
