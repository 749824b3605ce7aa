"""Mail acceptance in the store (hub/store/accepting): accept, group commits, routing, mail
settings.
"""
