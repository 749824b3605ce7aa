"""runtime.sqlite's tests: the durable stores' settings and transactions."""
