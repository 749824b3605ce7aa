"""Requests a sidecar or producer makes of the hub (hub/wire/requests): blobs, ingress, sleep,
state.
"""
