"""Product processes a test starts and finds: ports of its own, a start's wait, up's processes."""
