"""Scale to zero, the sidecar's part (sidecar/_sleep.py)."""
