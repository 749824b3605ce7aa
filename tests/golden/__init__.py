"""Golden files: bytes every format version wrote, decoded by this release."""
