"""The actor kernel's tests (runtime/actors)."""
