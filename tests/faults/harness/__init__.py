"""The fault harness: a NATS fault proxy, a cluster of real processes, workloads, rounds, the
checker and the scenarios.
"""
