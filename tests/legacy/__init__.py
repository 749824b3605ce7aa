"""Release 1 state dirs, written the way release 1 left them (docs/design.md section 6)."""
