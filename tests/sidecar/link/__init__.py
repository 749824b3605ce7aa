"""The sidecar's link to the hub (sidecar/link): hand-off, shipper, sessions, control frames,
delivery cycles, batches.
"""
