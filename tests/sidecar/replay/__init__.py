"""The replay executor (sidecar/replay): same code, new code, mail, steps and timers."""
