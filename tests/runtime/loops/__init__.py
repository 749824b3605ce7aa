"""Task and loop helpers' tests (runtime/loops)."""
