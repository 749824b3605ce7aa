"""Mail end to end through a real `mailrun up`, and the yardsticks its figures are set against.

The flood and the lone mail, fan-out, timers, tracing and slow clients, each through `up`
and its processes; beside them what the same work costs without mailrun: the reference
durable hand-off, the floor of a lone mail, DBOS Transact.
"""
