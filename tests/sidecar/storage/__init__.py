"""The sidecar's inbox on disk (sidecar/storage): batches, legacy and damaged entries, step rows,
encoded events.
"""
