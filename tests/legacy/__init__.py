"""Release 1 state dirs, written the way release 1 left them (LEGACY-V1.md)."""
