"""The runs' routes (hub/api/routes/runs): approvals, cancel and pause, signals, replay."""
