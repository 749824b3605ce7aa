"""Runs in the sidecar (sidecar/execution): concurrency, budgets, policies, cancel, gates,
children, watches, limits, versions.
"""
