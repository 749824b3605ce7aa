"""What an operator sees and guards, end to end: console, events, metrics, health, compose, auth,
identities, private state.
"""
