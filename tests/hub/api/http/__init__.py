"""The hub's HTTP server and its guards (hub/api/http, auth): limits, the gate, hostile bodies,
tokens.
"""
