"""The transports' tests (runtime/transport, the in-memory bus)."""
